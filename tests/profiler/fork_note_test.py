"""gpumem_note_cuda_in_forked_child (what the Python package calls when torch.cuda is
initialized in a forked DataLoader worker): stderr names the problem and the fix, once,
and the child's own trace holds the annotation; the parent's trace name is not reused.

usage: fork_note_test.py LIBGPUMEM GPUMEM_CLI. Exits non-zero on failure.
"""
import os
import subprocess
import sys
import tempfile

CHILD = r'''
import ctypes, os, sys
lib = ctypes.CDLL(sys.argv[1])
lib.gpumem_note_cuda_in_forked_child.argtypes = [ctypes.c_char_p]
pid = os.fork()
if pid == 0:
    lib.gpumem_note_cuda_in_forked_child(b"test call")
    lib.gpumem_note_cuda_in_forked_child(b"second call")  # said once only
    os._exit(0)
os.waitpid(pid, 0)
print(pid)
'''


def check(lib, cli, pattern, expected_name):
    failures = []
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, GPUMEM_TRACE=os.path.join(d, pattern))
        r = subprocess.run([sys.executable, "-c", CHILD, lib], env=env, capture_output=True,
                           text=True, timeout=60)
        if r.returncode != 0:
            return [f"{pattern}: child exit {r.returncode}: {r.stderr}"]
        pid = r.stdout.strip()
        if r.stderr.count("gpumem: CUDA was called") != 1:
            failures.append(f"{pattern}: message not said exactly once: {r.stderr!r}")
        if "forked from a process" not in r.stderr or "'spawn'" not in r.stderr:
            failures.append(f"{pattern}: stderr lacks the problem or the fix: {r.stderr!r}")
        trace = os.path.join(d, expected_name.replace("PID", pid))
        if not os.path.exists(trace):
            return failures + [f"{pattern}: no trace {trace}; files: {os.listdir(d)}"]
        dump = subprocess.run([cli, "dump", trace], capture_output=True, text=True)
        notes = [l for l in dump.stdout.splitlines() if "\tannotate\t" in l]
        if len(notes) != 1 or "cuda-in-forked-child: test call" not in notes[0] \
                or "spawn" not in notes[0]:
            failures.append(f"{pattern}: annotation missing or wrong: {notes} {dump.stderr}")
        if dump.stderr:
            failures.append(f"{pattern}: dump warned: {dump.stderr}")
    return failures


def main():
    lib, cli = sys.argv[1], sys.argv[2]
    failures = check(lib, cli, "t-%p.gpumem", "t-PID.gpumem")
    failures += check(lib, cli, "t.gpumem", "t.gpumem.child-PID")
    for f in failures:
        print("FAIL:", f)
    if not failures:
        print("fork note ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
