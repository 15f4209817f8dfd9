"""thread_times.py: a step that spins shows on the stepping thread's CPU (or, on a loaded
machine, waiting in the run queue for one), a step that sleeps in neither, and the
summary splits recording steps from the others."""
import io
import json
import os
import sys
import tempfile
import time
from contextlib import redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from thread_times import ThreadTimes, summarize  # noqa: E402

STEP_S = 0.05


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def main():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "threads.jsonl")
        tt = ThreadTimes(path)
        for i in range(1, 7):
            busy = i % 2 == 1
            spin(STEP_S) if busy else time.sleep(STEP_S)
            tt.step(i, busy)
        rows = [json.loads(line) for line in open(path)]
        assert len(rows) == 6, rows
        me = open("/proc/self/comm").read().strip()
        step_ms = STEP_S * 1e3
        for r in rows:
            on_ms, wait_ms = (x * 1e-6 for x in r["threads"][me])
            if r["recording"]:  # spun: on a CPU or runnable the whole step
                assert on_ms > 0 and on_ms + wait_ms > 0.8 * step_ms, (r, on_ms, wait_ms)
            else:
                assert on_ms + wait_ms < 0.4 * step_ms, (r, on_ms, wait_ms)
        out = io.StringIO()
        with redirect_stdout(out):
            summarize(path, warmup=0)
        text = out.getvalue()
        assert "recording on/wait ms" in text and "not on/wait ms" in text, text
        line = next(x for x in text.splitlines() if x.startswith(me))
        cells = line.split()  # name, on / wait (recording), on / wait (not)
        busy_ms = float(cells[1]) + float(cells[3])
        idle_ms = float(cells[4]) + float(cells[6])
        assert busy_ms > 0.8 * step_ms > 0.4 * step_ms > idle_ms, text
    print("thread_times_test: ok")


if __name__ == "__main__":
    main()
