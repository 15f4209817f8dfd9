"""Where a training step's time goes (multi_gpu_train.py --phases): at each phase boundary
the host's clock and a CUDA event, read once the step has synchronized. The host figures
say when each phase's work was queued, the device figures how long the device took
between the boundaries; a step that is long on the host but not on the device waited on
the host (a stalled thread, a blocking call), the other way round on the device (a
kernel, a collective, another process's work)."""
import time


class PhaseClock:
    """start(), then mark(name) at the end of each phase; finish() after the step's
    synchronize returns {"host": {name: ms}, "device": {name: ms}}. `event` makes an
    object with record() and elapsed_time(other) in ms (torch.cuda.Event with timing)."""

    def __init__(self, event, clock=time.perf_counter):
        self._event, self._clock = event, clock
        self._marks = []  # (name, host seconds, event)

    def _record(self, name):
        e = self._event()
        e.record()
        self._marks.append((name, self._clock(), e))

    def start(self):
        self._marks = []
        self._record(None)

    def mark(self, name):
        self._record(name)

    def finish(self):
        host, device = {}, {}
        for (_, t0, e0), (name, t1, e1) in zip(self._marks, self._marks[1:]):
            host[name] = round((t1 - t0) * 1e3, 3)
            device[name] = round(e0.elapsed_time(e1), 3)
        return {"host": host, "device": device}


def cuda_event():
    import torch
    return torch.cuda.Event(enable_timing=True)
