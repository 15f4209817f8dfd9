"""thread_times.py: a step that spins shows on the stepping thread's CPU, a step that
sleeps does not, and the summary splits recording steps from the others."""
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
        for r in rows:
            on_ms = r["threads"][me][0] * 1e-6
            if r["recording"]:
                assert on_ms > 0.6 * STEP_S * 1e3, (r, on_ms)
            else:
                assert on_ms < 0.4 * STEP_S * 1e3, (r, on_ms)
        out = io.StringIO()
        with redirect_stdout(out):
            summarize(path, warmup=0)
        text = out.getvalue()
        assert "recording on/wait ms" in text and "not on/wait ms" in text, text
        line = next(x for x in text.splitlines() if x.startswith(me))
        busy_ms, idle_ms = float(line.split()[1]), float(line.split()[4])
        assert busy_ms > 0.6 * STEP_S * 1e3 > 0.4 * STEP_S * 1e3 > idle_ms, text
    print("thread_times_test: ok")


if __name__ == "__main__":
    main()
