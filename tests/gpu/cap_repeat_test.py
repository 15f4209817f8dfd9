"""cap_repeat.py: every (allocator, cap) pair runs --runs times, each run counts as
completed only if the training script's last JSON line says so, a script that prints no
JSON is a failed run with its last stderr line as the error, and bad arguments stop it
with a message. A stand-in for capture.py completes at caps of at least 100 MiB for "a"
and 200 MiB for "b", and crashes for "c"."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = r'''
import argparse, json, sys
p = argparse.ArgumentParser()
p.add_argument("workload"); p.add_argument("--allocator"); p.add_argument("--cap", type=int)
a = p.parse_args()
if a.allocator == "c":
    sys.exit("fake: the run crashed")
need = {"a": 100, "b": 200}[a.allocator] << 20
print("some log line")
print(json.dumps({"completed": a.cap >= need, "steps": 3, "error": None if a.cap >= need else "oom"}))
'''


def run(*argv):
    return subprocess.run([sys.executable, os.path.join(HERE, "cap_repeat.py"), *argv],
                          capture_output=True, text=True)


def main():
    with tempfile.TemporaryDirectory() as d:
        fake = os.path.join(d, "fake_capture.py")
        open(fake, "w").write(FAKE)
        out = run("resnet50", "--capture", fake, "--caps", "150", "--allocators", "a,b",
                  "--at", "c=300", "--runs", "2", "--parallel", "3")
        assert out.returncode == 0, out.stderr
        rows = [json.loads(line) for line in out.stdout.splitlines()]
        runs = [r for r in rows if "run" in r]
        tally = {(r["allocator"], r["cap_mib"]): (r["runs"], r["completed"])
                 for r in rows if "runs" in r}
        assert len(runs) == 6, runs
        assert tally == {("a", 150): (2, 2), ("b", 150): (2, 0), ("c", 300): (2, 0)}, tally
        crashed = [r for r in runs if r["allocator"] == "c"]
        assert all(r["error"] == "fake: the run crashed" for r in crashed), crashed
        # Run k of every pair comes before run k+1 of any.
        assert [r["run"] for r in runs] == [0, 0, 0, 1, 1, 1], runs

    for argv, message in ((["resnet50"], "no caps given"),
                          (["resnet50", "--caps", "3e3"], "--caps wants MiB as integers"),
                          (["resnet50", "--at", "gpumem"], "--at wants ALLOCATOR=CAP,CAP"),
                          (["resnet50", "--caps", "1", "--runs", "0"], "at least 1")):
        out = run(*argv)
        assert out.returncode != 0 and message in out.stderr, (argv, out.stderr)
    print("cap_repeat_test: ok")


if __name__ == "__main__":
    main()
