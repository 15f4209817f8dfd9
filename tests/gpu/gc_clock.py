"""Python's garbage collector, timed per training step: a full collection of a PyTorch
process's heap stalls its step for tens of milliseconds, at steps no two processes share,
which is most of the spread between two jobs' step times (multi_gpu_train.py)."""
import gc
import time


class GcClock:
    """Milliseconds spent in collections, step by step, and how many of each generation.
    `manual_every` > 0: automatic collection off, a full one at the end of every
    `manual_every`-th step instead (the same steps in every job, as Megatron-LM's
    --manual-gc does)."""

    def __init__(self, manual_every=0):
        if manual_every < 0:
            raise ValueError(f"manual_every must be 0 (off) or more, not {manual_every}")
        self.manual_every = manual_every
        self.step_ms = 0.0
        self.collections = [0, 0, 0]
        self._started = None
        gc.callbacks.append(self._on_collect)
        if manual_every:
            gc.disable()

    def _on_collect(self, phase, info):
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started is not None:
            self.step_ms += (time.perf_counter() - self._started) * 1e3
            self.collections[info["generation"]] += 1
            self._started = None

    def end_step(self, step):
        """Inside the step's timing: the manual collection where one is due."""
        if self.manual_every and (step + 1) % self.manual_every == 0:
            gc.collect()

    def take_step_ms(self):
        ms, self.step_ms = self.step_ms, 0.0
        return ms

    def close(self):
        gc.callbacks.remove(self._on_collect)
        if self.manual_every:
            gc.enable()
