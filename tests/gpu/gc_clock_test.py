"""gc_clock.GcClock without a GPU: collections are timed into the step they stall and
counted by generation; a manual clock turns automatic collection off, collects at the end
of every N-th step alone, and gives automatic collection back when closed."""
import gc
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gc_clock import GcClock  # noqa: E402


def make_cycles(n=2000):
    for _ in range(n):
        a = []
        a.append(a)


class GcClockTest(unittest.TestCase):
    def tearDown(self):
        gc.enable()

    def test_manual_collects_every_nth_step_only(self):
        clock = GcClock(manual_every=3)
        self.assertFalse(gc.isenabled())
        stalled = []
        for step in range(6):
            make_cycles()
            clock.end_step(step)
            stalled.append(clock.take_step_ms() > 0)
        self.assertEqual(stalled, [False, False, True, False, False, True])
        self.assertEqual(clock.collections[2], 2)
        clock.close()
        self.assertTrue(gc.isenabled())

    def test_automatic_collections_are_timed_and_counted(self):
        clock = GcClock()
        self.assertTrue(gc.isenabled())
        gc.collect(0)
        gc.collect(1)
        # At least these two (an automatic one may come between).
        self.assertGreaterEqual(clock.collections[0], 1)
        self.assertGreaterEqual(clock.collections[1], 1)
        self.assertGreater(clock.take_step_ms(), 0)
        self.assertEqual(clock.take_step_ms(), 0)  # taken
        before = clock.collections[2]
        clock.end_step(0)  # nothing due without manual collection
        self.assertEqual(clock.collections[2], before)
        clock.close()

    def test_negative_interval_refused(self):
        with self.assertRaises(ValueError):
            GcClock(manual_every=-1)


if __name__ == "__main__":
    unittest.main()
