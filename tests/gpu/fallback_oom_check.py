#!/usr/bin/env python3
"""gpumem's allocator without libgpumem_torch.so: the Python package then wires PyTorch's
pluggable allocator to libgpumem.so alone. An allocation past gpumem's cap must raise a
RuntimeError that begins "CUDA out of memory." (not hand PyTorch a NULL, which became a
tensor without memory and then an illegal address), and the process must go on: a later
tensor computes right.

The package is copied with libgpumem.so alone into a temporary folder, so that neither
its folder nor a build folder beside it holds libgpumem_torch.so.

Prints a Markdown line; exit 1 when a check fails.

usage: fallback_oom_check.py LIBGPUMEM_SO
"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(HERE, "..", "..", "python", "gpumem")

SCRIPT = """
import sys, warnings
sys.path.insert(0, sys.argv[1])
import torch, gpumem
with warnings.catch_warnings(record=True) as said:
    warnings.simplefilter("always")
    gpumem.install()
print("fell back:", any("libgpumem_torch.so not found" in str(w.message) for w in said))
gpumem.set_capacity(1 << 30)
keep = torch.ones(256 << 20, dtype=torch.uint8, device="cuda")
try:
    big = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    big.fill_(1)
    torch.cuda.synchronize()
    print("raised: nothing")
except RuntimeError as e:
    print("raised:", type(e).__name__, str(e).splitlines()[0][:80])
x = torch.arange(1024, device="cuda", dtype=torch.float32)
# keep.sum() would promote the bytes to int64, 2 GiB past the cap: compare them instead.
print("after:", int(x.sum().item()), bool(keep.eq(1).all().item()))
"""


def main():
    lib = sys.argv[1]
    root = tempfile.mkdtemp(prefix="gpumem-fallback-")
    shutil.copytree(PACKAGE, os.path.join(root, "gpumem"),
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    shutil.copy(lib, os.path.join(root, "gpumem", "libgpumem.so"))
    env = {k: v for k, v in os.environ.items() if k != "GPUMEM_LIB_DIR"}
    env.update(PYTHONUNBUFFERED="1", GPUMEM_LOG_OOM="0")
    p = subprocess.run([sys.executable, "-c", SCRIPT, root], env=env, capture_output=True,
                       text=True, timeout=300)
    out = dict(line.split(": ", 1) for line in p.stdout.splitlines() if ": " in line)
    checks = {
        "fell back to the pluggable allocator": out.get("fell back") == "True",
        "raised a RuntimeError in PyTorch's words":
            out.get("raised", "").startswith("RuntimeError CUDA out of memory."),
        "went on: later tensors right": out.get("after") == f"{1023 * 1024 // 2} True",
        "exit 0": p.returncode == 0,
    }
    ok = all(checks.values())
    print(f"| fallback out of memory | {'pass' if ok else 'FAIL'} | "
          + "; ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in checks.items())
          + f" | {out} |")
    if not ok:
        print(p.stderr[-3000:], file=sys.stderr)
    shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
