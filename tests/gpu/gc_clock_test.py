"""gc_clock.GcClock without a GPU: collections are timed into the step they stall and
counted by generation, and the clock leaves gc's callbacks as it found them."""
import gc
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gc_clock import GcClock  # noqa: E402


class GcClockTest(unittest.TestCase):
    def test_collections_are_timed_and_counted(self):
        clock = GcClock()
        gc.collect(0)
        gc.collect(2)
        # At least these two (an automatic one may come between).
        self.assertGreaterEqual(clock.collections[0], 1)
        self.assertGreaterEqual(clock.collections[2], 1)
        self.assertGreater(clock.take_step_ms(), 0)
        self.assertEqual(clock.take_step_ms(), 0)  # taken
        clock.close()

    def test_close_removes_the_callback(self):
        before = list(gc.callbacks)
        clock = GcClock()
        clock.close()
        self.assertEqual(gc.callbacks, before)
        gc.collect()
        self.assertEqual(clock.collections, [0, 0, 0])


if __name__ == "__main__":
    unittest.main()
