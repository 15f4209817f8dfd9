"""obstacle_plan_bound.py: exact on a small repeating step, the addresses `gpumem replay
--addresses` writes read back against a real trace, and clear errors on mismatched input.
usage: obstacle_plan_bound_test.py GPUMEM_BINARY"""
import gzip
import io
import os
import subprocess
import sys
import tempfile
from contextlib import redirect_stdout

here = os.path.dirname(os.path.abspath(__file__))
tool = os.path.join(here, "..", "..", "bench", "research", "obstacle_plan_bound.py")
sys.path.insert(0, os.path.dirname(tool))
import obstacle_plan_bound as opb  # noqa: E402

DATA = os.path.join(here, "..", "data")
MiB = 1 << 20


def write(d, rows, placed):
    trace = os.path.join(d, "t.trace.tsv.gz")
    with gzip.open(trace, "wt") as f:
        f.write("# seq\taction\taddr\tsize\tstream\ttime_us\tstack\n")
        for i, (action, addr, size) in enumerate(rows):
            f.write(f"{i}\t{action}\t{addr}\t{size}\t0\t{i}\t0\n")
    addresses = os.path.join(d, "t.addr")
    with open(addresses, "w") as f:
        f.write("# event\ttrace_addr\taddr\tsize\n")
        k = 0
        for i, (action, addr, size) in enumerate(rows):
            if action == "alloc":
                f.write(f"{i}\t{addr}\t{placed[k]}\t{size}\n")
                k += 1
    return trace, addresses


def run(args):
    out = io.StringIO()
    with redirect_stdout(out):
        rc = opb.main(args)
    return rc, out.getvalue()


def main():
    with tempfile.TemporaryDirectory() as d:
        # A weight of 1 MiB the policy put at the start of page 0, then five steps of
        # a (2 MiB), b (1 MiB) alive with a and then with c (2 MiB). a and c never live
        # at once: both go right after the weight, b after them: 4 MiB, 2 pages, which is
        # also the step's peak (weight + a + b).
        rows = [("alloc", 1, MiB)]
        placed = [0]
        for step in range(5):
            rows += [("alloc", 2, 2 * MiB), ("alloc", 3, MiB), ("free_completed", 2, 2 * MiB),
                     ("alloc", 4, 2 * MiB), ("free_completed", 3, MiB),
                     ("free_completed", 4, 2 * MiB)]
            placed += [64 * MiB, 80 * MiB, 96 * MiB]
        trace, addresses = write(d, rows, placed)
        rc, out = run([trace, addresses])
        assert rc == 0, out
        assert "1 long-lived blocks on 1 pages, 3 planned" in out, out
        assert "2.0 pages needed (step's peak live 2.0 pages)" in out, out
        # Addresses of another trace: named, no traceback.
        rows[1] = ("alloc", 2, 3 * MiB)
        other = os.path.join(d, "other")
        os.mkdir(other)
        trace, _ = write(other, rows, placed)
        r = subprocess.run([sys.executable, tool, trace, addresses], capture_output=True,
                           text=True)
        assert r.returncode != 0 and "does not match" in r.stderr, r
        assert "Traceback" not in r.stderr, r.stderr
    if len(sys.argv) > 1:
        gpumem = sys.argv[1]
        real = os.path.join(DATA, "leaky_mlp.trace.tsv.gz")
        with tempfile.TemporaryDirectory() as d:
            addresses = os.path.join(d, "leaky.addr")
            r = subprocess.run([gpumem, "replay", "--policy", "gpumem", "--addresses", addresses,
                                real], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            rc, out = run([real, addresses])
            assert rc == 0 and "pages needed" in out, out
            need = float(out.split(" pages needed")[0].split()[-1])
            peak = float(out.split("peak live ")[1].split()[0])
            assert need >= peak, out
            # One policy and one trace only.
            r = subprocess.run([gpumem, "replay", "--addresses", addresses, real],
                               capture_output=True, text=True)
            assert r.returncode == 2 and "--addresses needs" in r.stderr, r
    print("obstacle_plan_bound_test: ok")


if __name__ == "__main__":
    main()
