"""GPU proof (issue 5): kill -9 in the middle of real training loses no recorded event.

Starts tests/gpu/capture.py WORKLOAD under `gpumem run --trace FILE`; after every step the
training prints to stderr how many events gpumem had recorded so far
(gpumem.trace_events(), read after the step's allocations returned). Some seconds into
training the process gets SIGKILL (no flush, no destructor, no atexit). `gpumem dump` on
the trace must then read back at least the last count printed, and `gpumem report` must
still diagnose the file. Prints one PASS or FAIL line with the figures; exit 0 on PASS.

usage: kill_during_training.py --gpumem CLI --out DIR [--workload leaky_mlp]
                               [--steps 100000] [--after 2.0 | --kill-step N]
                               [--jitter 2.0] [--seed 1]
                               [--trainer SCRIPT]   (instead of capture.py: the CPU test's
                                                     sim-backend trainer, same output)
"""
import argparse
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CAPTURE = os.path.join(HERE, "..", "capture.py")
COUNT_LINE = re.compile(r"^gpumem-trace-events (\d+) step (\d+)$")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gpumem", required=True, help="the gpumem CLI")
    p.add_argument("--out", required=True, help="folder for the trace and logs")
    p.add_argument("--workload", default="leaky_mlp")
    p.add_argument("--steps", type=int, default=100000, help="more than can run before the kill")
    p.add_argument("--after", type=float, default=2.0,
                   help="seconds of training (after the first step) before the kill, "
                        "+0..jitter s")
    p.add_argument("--kill-step", type=int, default=0,
                   help="instead of --after: kill once this step was counted, +0..jitter s "
                        "(for fast workloads whose leak would run out of memory first)")
    p.add_argument("--jitter", type=float, default=2.0, help="random extra wait, seconds")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--start-timeout", type=float, default=600)
    p.add_argument("--trainer", default="", help="a script printing the same count lines")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    name = f"kill9-{args.workload}"
    trace = os.path.join(args.out, name + ".gpumem")
    if os.path.exists(trace):
        os.remove(trace)
    if args.trainer:
        train = [args.trainer, "--steps", str(args.steps)]
    else:
        train = [CAPTURE, args.workload, "--allocator", "gpumem", "--steps", str(args.steps),
                 "--report-trace-events"]
    cmd = [args.gpumem, "run", "--trace", trace, "--", sys.executable] + train
    log_path = os.path.join(args.out, name + ".stderr")
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    state = {"count": None, "step": 0, "first": None}
    lock = threading.Lock()

    def read_stderr():
        with open(log_path, "w") as log:
            for line in child.stderr:
                log.write(line)
                m = COUNT_LINE.match(line.strip())
                if m:
                    with lock:
                        # Printed before the kill by construction: every such line counts.
                        state["count"] = max(state["count"] or 0, int(m.group(1)))
                        state["step"] = max(state["step"], int(m.group(2)))
                        if state["first"] is None:
                            state["first"] = time.monotonic()

    reader = threading.Thread(target=read_stderr)
    reader.start()
    deadline = time.monotonic() + args.start_timeout
    while time.monotonic() < deadline and child.poll() is None:
        with lock:
            if state["first"] is not None:
                break
        time.sleep(0.05)
    if child.poll() is not None:
        reader.join()
        print(f"FAIL {name}: training exited ({child.returncode}) before its first step "
              f"was counted; see {log_path}")
        return 1
    with lock:
        if state["first"] is None:
            child.kill()
            reader.join()
            print(f"FAIL {name}: no step within {args.start_timeout:.0f} s; see {log_path}")
            return 1
    if args.kill_step > 0:
        while child.poll() is None:
            with lock:
                if state["step"] >= args.kill_step:
                    break
            time.sleep(0.001)
    else:
        time.sleep(args.after)
    time.sleep(random.Random(args.seed).uniform(0, args.jitter))  # lands anywhere in a step
    with lock:
        delay = time.monotonic() - state["first"]
    with lock:
        step_before_kill = state["step"]
    if child.poll() is None:
        os.kill(child.pid, signal.SIGKILL)  # `gpumem run` exec'd python: the trainer itself
    child.wait()
    reader.join()
    if child.returncode != -signal.SIGKILL:
        print(f"FAIL {name}: training ended ({child.returncode}) before the kill; "
              f"raise --steps or lower --after; see {log_path}")
        return 1
    counted, step = state["count"], state["step"]

    dump = subprocess.run([args.gpumem, "dump", trace], capture_output=True, text=True)
    if dump.returncode != 0:
        print(f"FAIL {name}: gpumem dump exit {dump.returncode}: {dump.stderr.strip()}")
        return 1
    header = re.search(r"format gpumem, (\d+) events", dump.stdout)
    recovered = int(header.group(1)) if header else -1
    journal = re.search(r"recovered (\d+) events: (\d+) in (\d+) chunks .* and (\d+) from the raw "
                        r"journal", dump.stderr)
    split = (f"{journal.group(2)} in {journal.group(3)} chunks + {journal.group(4)} from the "
             f"raw journal" if journal else "no recovery line")
    with open(os.path.join(args.out, name + ".dump.stderr"), "w") as f:
        f.write(dump.stderr)
    report = subprocess.run([args.gpumem, "report", trace], capture_output=True, text=True)
    with open(os.path.join(args.out, name + ".report.txt"), "w") as f:
        f.write(report.stdout + report.stderr)
    figures = (f"killed {delay:.2f} s into training at step {step} "
               f"(step {step_before_kill} when the kill was decided); the process had counted "
               f"{counted} events; the trace reads back {recovered} ({split}); "
               f"trace {os.path.getsize(trace)} bytes; gpumem report exit {report.returncode}")
    ok = (recovered >= counted > 0 and journal is not None and report.returncode == 0
          and "did not finish" in dump.stderr)
    print(f"{'PASS' if ok else 'FAIL'} {name}: {figures}")
    if not ok and recovered < (counted or 0):
        print(f"  lost {counted - recovered} events counted before the kill")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
