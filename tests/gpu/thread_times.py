"""Where a training step's time goes, thread by thread (capture.py --thread-times PATH):
after each step, each thread's on-CPU and run-queue nanoseconds since the last step, from
/proc/self/task/*/schedstat, summed by thread name. A recording cost paid on the training
threads shows as more on-CPU time there; one paid elsewhere (another thread, the kernel
holding a thread off its CPU) shows as wall time that no thread ran.

usage: thread_times.py PATH [--warmup N]   summary per thread name: ms per step on CPU and
       waiting for one, recording against not (capture.py --toggle) where steps say which
"""
import argparse
import json
import os
import statistics
import sys


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:  # the thread exited between listing and reading
        return None


class ThreadTimes:
    def __init__(self, path):
        self.out = open(path, "w")
        self.last = self._sample()

    @staticmethod
    def _sample():
        """{tid: (name, on_cpu_ns, runqueue_ns)} for every thread of this process."""
        threads = {}
        for tid in os.listdir("/proc/self/task"):
            stat = _read(f"/proc/self/task/{tid}/schedstat")
            name = _read(f"/proc/self/task/{tid}/comm")
            if stat is None or name is None:
                continue
            run, wait = (int(x) for x in stat.split()[:2])
            threads[tid] = (name.strip(), run, wait)
        return threads

    def step(self, index, recording):
        now = self._sample()
        by_name = {}
        for tid, (name, run, wait) in now.items():
            _, run0, wait0 = self.last.get(tid, (name, 0, 0))
            total = by_name.setdefault(name, [0, 0])
            total[0] += run - run0
            total[1] += wait - wait0
        self.last = now
        self.out.write(json.dumps({"step": index, "recording": recording,
                                   "threads": by_name}) + "\n")
        self.out.flush()


def summarize(path, warmup):
    arms = {}  # recording (True / False / None) -> name -> [(on ms, wait ms) per step]
    for line in open(path):
        r = json.loads(line)
        if r["step"] <= warmup:
            continue
        for name, (run, wait) in r["threads"].items():
            arms.setdefault(r["recording"], {}).setdefault(name, []).append(
                (run * 1e-6, wait * 1e-6))
    names = sorted({n for arm in arms.values() for n in arm},
                   key=lambda n: -max(statistics.fmean(x[0] for x in arm.get(n, [(0, 0)]))
                                      for arm in arms.values()))
    label = {True: "recording", False: "not", None: "all"}
    print(f"{'thread':<18}" + "".join(f"{label[a] + ' on/wait ms':>26}" for a in arms))
    for name in names:
        cells = []
        for arm in arms.values():
            steps = arm.get(name, [])
            on = statistics.fmean(x[0] for x in steps) if steps else 0.0
            wait = statistics.fmean(x[1] for x in steps) if steps else 0.0
            cells.append(f"{on:>17.3f} / {wait:>6.3f}")
        print(f"{name:<18}" + "".join(cells))


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("path")
    p.add_argument("--warmup", type=int, default=10)
    args = p.parse_args(argv)
    summarize(args.path, args.warmup)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
