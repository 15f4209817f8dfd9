"""gpumem's profile-only mode and backward attribution on a real GPU with PyTorch.

- profile-only (`gpumem run --profile-only`): leaky_mlp of capture.py on PyTorch's own
  allocator gives a trace whose report names the leak's line, with one step per step;
- a backward allocation (a weight gradient, made on autograd's engine thread) is
  attributed to the forward line that created its node, in a traced gpumem run and in
  profile-only mode;
- a bad GPUMEM_MODE stops the program with the accepted values.
Exit 77 (skipped) without torch, a GPU or libgpumem_torch.so.

usage: torch_profile_test.py --cli path/to/gpumem [case ...]
"""
import json
import os
import subprocess
import sys
import tempfile
import textwrap

from gpu_cases import HERE, Cases, env_with, pop_option
from gpu_cases import run as run_cases

CAPTURE = os.path.join(HERE, "capture.py")
CASES = Cases()
case = CASES.add
CLI = None
# GPUMEM_TEST_KEEP=DIR keeps the scripts, traces and reports there (to look into a failure).
TMP = os.environ.get("GPUMEM_TEST_KEEP") or tempfile.mkdtemp(prefix="gpumem-profile-test-")
os.makedirs(TMP, exist_ok=True)


def run(argv, extra=None, timeout=600):
    r = subprocess.run(argv, env=env_with(extra or {}), capture_output=True, text=True,
                       timeout=timeout)
    return r


def report(trace):
    r = run([CLI, "report", "--json", trace])
    assert r.returncode == 0, f"report failed ({r.returncode}): {r.stderr[-2000:]}"
    with open(trace + ".report.json", "w") as f:
        f.write(r.stdout)
    return json.loads(r.stdout)


def line_of(path, text):
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if text in line:
                return n
    raise AssertionError(f"{text!r} not in {path}")


@case
def profile_only_names_the_leak_site():
    trace = os.path.join(TMP, "leaky_mlp-profile.gpumem")
    r = run([CLI, "run", "--profile-only", "--trace", trace, "--", sys.executable, CAPTURE,
             "leaky_mlp", "--allocator", "profile", "--steps", "20"],
            extra={"GPUMEM_STACKS": "python"})
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr[-3000:]}"
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["completed"] and result["steps"] == 20, result
    # PyTorch's own allocator served the run: its statistics saw the allocations.
    assert result["peak_allocated"] > 0 and "num_alloc_retries" in result, result
    rep = report(trace)
    assert rep["steps"]["count"] >= 20, rep["steps"]
    leak_line = line_of(CAPTURE, "loss = m(x).pow(2).mean()")
    sites = [s["site"] for s in rep["leak_suspects"]]
    assert sites and sites[0].endswith(f"capture.py:{leak_line} leaky_mlp"), sites[:3]
    print(f"  top leak site: {sites[0]}, {rep['leak_suspects'][0]['bytes_per_step']:.0f} B/step")


# A weight gradient made by backward each step and kept: a leak whose allocations happen
# on autograd's engine thread, with no Python frames of their own.
BACKWARD_LEAK = """
import torch, gpumem
{setup}
model = torch.nn.Linear(1024, 1024).cuda()
kept = []
for step in range(16):
    x = torch.randn(64, 1024, device="cuda")
    out = model(x)  # FORWARD LINE
    out.sum().backward()
    kept.append(model.weight.grad)
    model.weight.grad = None
    model.bias.grad = None
    gpumem.step()
torch.cuda.synchronize()
print("OK")
"""


def backward_case(name, setup, extra):
    script = os.path.join(TMP, f"{name}.py")
    with open(script, "w") as f:
        f.write(textwrap.dedent(BACKWARD_LEAK.format(setup=setup)))
    trace = os.path.join(TMP, f"{name}.gpumem")
    r = run([sys.executable, script],
            extra={"GPUMEM_TRACE": trace, "GPUMEM_STACKS": "python", **extra})
    assert r.returncode == 0 and "OK" in r.stdout, f"exit {r.returncode}: {r.stderr[-3000:]}"
    rep = report(trace)
    forward = line_of(script, "# FORWARD LINE")
    assert rep["leak_suspects"], rep.get("leak_note")
    top = rep["leak_suspects"][0]
    assert top["site"].endswith(f"{name}.py:{forward} <module>"), (top["site"], top["stack"][:4])
    assert "(backward)" in top["stack"][0], top["stack"][:4]
    print(f"  {top['site']} <- {top['stack'][0]}")


@case
def backward_allocation_attributed_in_traced_run():
    backward_case("backward_traced", "gpumem.install()", {})


@case
def backward_allocation_attributed_in_profile_mode():
    backward_case("backward_profile", "gpumem.profile()", {"GPUMEM_MODE": "profile"})


@case
def bad_mode_is_a_clear_error():
    r = run([sys.executable, "-c", "import torch, gpumem; gpumem.profile(); print('ran on')"],
            extra={"GPUMEM_MODE": "sample"})
    assert r.returncode != 0 and "ran on" not in r.stdout, (r.stdout, r.stderr)
    assert "GPUMEM_MODE='sample': expected allocator or profile" in r.stderr, r.stderr[-2000:]
    bad = run([CLI, "run", "--profile-only", "--backend", "tpu", "--", "true"])
    assert bad.returncode == 2 and "GPUMEM_BACKEND='tpu'" in bad.stderr, bad.stderr


def main():
    global CLI
    args = sys.argv[1:]
    CLI = pop_option(args, "--cli")
    if CLI is None:
        print("usage: torch_profile_test.py --cli path/to/gpumem [case ...]")
        return 2
    return run_cases(CASES, args, need_torch_lib=True)


if __name__ == "__main__":
    sys.exit(main())
