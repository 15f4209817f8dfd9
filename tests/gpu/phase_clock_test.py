"""phase_clock.PhaseClock without a GPU: made-up events and clock; each phase's host and
device milliseconds come from the boundaries on either side of it."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from phase_clock import PhaseClock  # noqa: E402


class FakeEvent:
    device_now = 0.0  # ms, moved by the test

    def record(self):
        self.at = FakeEvent.device_now

    def elapsed_time(self, later):
        return later.at - self.at


class PhaseClockTest(unittest.TestCase):
    def test_each_phase_between_its_boundaries(self):
        host = [10.0]
        clock = PhaseClock(FakeEvent, clock=lambda: host[0])
        clock.start()
        for name, host_s, device_ms in (("forward", 0.002, 30.0), ("backward", 0.001, 65.0),
                                        ("optimizer", 0.0005, 4.0)):
            host[0] += host_s
            FakeEvent.device_now += device_ms
            clock.mark(name)
        self.assertEqual(clock.finish(),
                         {"host": {"forward": 2.0, "backward": 1.0, "optimizer": 0.5},
                          "device": {"forward": 30.0, "backward": 65.0, "optimizer": 4.0}})

    def test_start_forgets_the_last_step(self):
        clock = PhaseClock(FakeEvent, clock=lambda: 0.0)
        clock.start()
        clock.mark("forward")
        clock.start()
        self.assertEqual(clock.finish(), {"host": {}, "device": {}})


if __name__ == "__main__":
    unittest.main()
