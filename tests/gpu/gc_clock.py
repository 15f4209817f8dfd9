"""Python's garbage collector, timed per training step (multi_gpu_train.py): whether a
collection stalled a step. On two H100s under FSDP2 none did: the ~10% of steps that take
~65 ms longer in one job and not the other (what spreads a block's time ratio ~8%) had
no collection in them (tests/gpu/results/h100x2-2026-11-26f/README.md)."""
import gc
import time


class GcClock:
    """Milliseconds spent in collections since the last take, and how many collections of
    each generation so far."""

    def __init__(self):
        self.step_ms = 0.0
        self.collections = [0, 0, 0]
        self._started = None
        gc.callbacks.append(self._on_collect)

    def _on_collect(self, phase, info):
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started is not None:
            self.step_ms += (time.perf_counter() - self._started) * 1e3
            self.collections[info["generation"]] += 1
            self._started = None

    def take_step_ms(self):
        ms, self.step_ms = self.step_ms, 0.0
        return ms

    def close(self):
        gc.callbacks.remove(self._on_collect)
