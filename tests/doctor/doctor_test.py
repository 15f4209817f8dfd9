"""`gpumem doctor` with no GPU and no torch, and with each problem injected.

usage: doctor_test.py path/to/gpumem path/to/fake/libcuda.so.1 path/to/lib_dir
"""
import json
import os
import resource
import subprocess
import sys
import tempfile

GPUMEM, FAKE_CUDA, LIB_DIR = sys.argv[1:4]
IDS = ["driver", "gpus", "gpu_memory", "vmm", "cuda_runtimes", "cupti_versions",
       "pinned_memory", "libgpumem", "torch", "start_method", "libgpumem_torch", "cupti"]
TMP = tempfile.mkdtemp(prefix="gpumem-doctor-test-")
EMPTY = os.path.join(TMP, "empty")
os.makedirs(EMPTY)

FAKE_TORCH = '''
import os, types
__version__ = "2.4.0+cu124"
version = types.SimpleNamespace(cuda=os.environ.get("FAKE_TORCH_CUDA") or None)
cuda = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 1,
                             is_initialized=lambda: os.environ.get("FAKE_TORCH_INIT") == "1")
multiprocessing = types.SimpleNamespace(
    get_start_method=lambda allow_none=False: os.environ.get("FAKE_START_METHOD"))
'''
FAKE_SMI = '''#!/bin/sh
[ -n "$FAKE_SMI_PID" ] && echo "GPU-10101010-1010-1010-1010-101010101010, $FAKE_SMI_PID, python3, 30000"
exit 0
'''


def write(path, text="", mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


write(os.path.join(TMP, "site/torch/__init__.py"), FAKE_TORCH)
write(os.path.join(TMP, "site/torch/lib/libcupti.so.12"))
write(os.path.join(TMP, "bin/nvidia-smi"), FAKE_SMI, 0o755)
write(os.path.join(TMP, "ld/libcudart.so.12"))
write(os.path.join(TMP, "ld/libcudart.so.13"))
write(os.path.join(TMP, "ld/libcupti.so.13"))


def doctor(env=None, memlock=None, json_out=True):
    """Runs gpumem doctor with the system's library folders and driver hidden unless `env`
    brings them; returns (exit code, parsed JSON or text)."""
    e = dict(os.environ, GPUMEM_LIB_DIR=LIB_DIR, GPUMEM_DOCTOR_LIBRARY_PATH=EMPTY,
             GPUMEM_DOCTOR_LIBCUDA=os.path.join(EMPTY, "libcuda.so.1"), LD_LIBRARY_PATH="",
             PYTHONPATH=os.path.join(TMP, "site"), FAKE_TORCH_CUDA="12.4",
             FAKE_START_METHOD="spawn")
    e.pop("CUDA_VISIBLE_DEVICES", None)
    e.update(env or {})
    pre = (lambda: resource.setrlimit(resource.RLIMIT_MEMLOCK, memlock)) if memlock else None
    args = [GPUMEM, "doctor"] + (["--json"] if json_out else [])
    p = subprocess.run(args, env=e, capture_output=True, text=True, preexec_fn=pre, timeout=300)
    return p.returncode, (json.loads(p.stdout) if json_out else p.stdout)


def by_id(doc):
    return {c["id"]: c for c in doc["checks"]}


failures = []


def expect(name, cond, doc):
    print(("ok   " if cond else "FAIL ") + name)
    if not cond:
        failures.append(name)
        print(json.dumps(doc, indent=1)[:4000] if not isinstance(doc, str) else doc)


def has_torch():
    return subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0


# No GPU and no torch: every check there is, the driver-level ones skipped with a reason.
rc, doc = doctor({"PYTHONPATH": EMPTY})
c = by_id(doc)
expect("json has every check", [x["id"] for x in doc["checks"]] == IDS, doc)
expect("statuses are ok/warn/fail/skipped",
       all(x["status"] in ("ok", "warn", "fail", "skipped") and x["finding"] for x in doc["checks"]), doc)
expect("no driver: driver-level checks skipped with the reason",
       all(c[i]["status"] == "skipped" for i in ("driver", "gpus", "gpu_memory", "vmm"))
       and "libcuda.so.1" in c["driver"]["finding"], doc)
if not has_torch():
    expect("no torch: torch skipped, says not installed",
           c["torch"]["status"] == "skipped" and "not installed" in c["torch"]["finding"], doc)
expect("no GPU, no torch: exit 0 (no check failed)", rc == 0 and doc["exit_code"] == 0, doc)
rc, text = doctor({"PYTHONPATH": EMPTY}, json_out=False)
expect("text: a skipped line per check it could not run, and a summary",
       rc == 0 and "skipped  driver" in text and "skipped  gpus" in text and " skipped (" in text, text)

# Two CUDA runtimes on LD_LIBRARY_PATH; CUPTI 13 there and 12 inside torch.
rc, doc = doctor({"LD_LIBRARY_PATH": os.path.join(TMP, "ld")})
c = by_id(doc)
expect("two libcudart versions: warn naming both",
       c["cuda_runtimes"]["status"] == "warn" and "libcudart.so.12" in c["cuda_runtimes"]["finding"]
       and "libcudart.so.13" in c["cuda_runtimes"]["finding"] and c["cuda_runtimes"]["fix"], doc)
expect("CUPTI 12 in torch and 13 on LD_LIBRARY_PATH: warn",
       c["cupti_versions"]["status"] == "warn" and "torch installation" in c["cupti_versions"]["finding"], doc)
rc, doc = doctor()
expect("one CUPTI (torch's): ok", by_id(doc)["cupti_versions"]["status"] == "ok", doc)

# Pinned-memory limit lowered in the child.
hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
rc, doc = doctor(memlock=(64 * 1024, hard))
c = by_id(doc)["pinned_memory"]
expect("ulimit -l 64 KiB: warn with the fix", c["status"] == "warn" and "64 KiB" in c["finding"]
       and "ulimit -l unlimited" in c["fix"], doc)
if hard == resource.RLIM_INFINITY:
    rc, doc = doctor(memlock=(hard, hard))
    expect("ulimit -l unlimited: ok", by_id(doc)["pinned_memory"]["status"] == "ok", doc)

# Fake torch: start method and CUDA build.
rc, doc = doctor({"FAKE_START_METHOD": "fork"})
c = by_id(doc)["start_method"]
expect("fork: warn, says CUDA in a forked worker fails, fix spawn",
       c["status"] == "warn" and "forked subprocess" in c["finding"] and "spawn" in c["fix"], doc)
rc, doc = doctor({"FAKE_START_METHOD": "fork", "FAKE_TORCH_INIT": "1"})
expect("fork after CUDA initialized at import: fail, exit 1",
       by_id(doc)["start_method"]["status"] == "fail" and rc == 1, doc)
rc, doc = doctor()
c = by_id(doc)
expect("spawn: ok", c["start_method"]["status"] == "ok", doc)
expect("fake torch loads: torch ok", c["torch"]["status"] == "ok" and "CUDA 12.4" in c["torch"]["finding"], doc)
rc, doc = doctor({"FAKE_TORCH_CUDA": ""})
expect("CPU-only torch: fail, exit 1", by_id(doc)["torch"]["status"] == "fail" and rc == 1, doc)

# Stand-in driver: versions, GPUs, memory and its holders, VMM.
cuda = {"GPUMEM_DOCTOR_LIBCUDA": FAKE_CUDA, "PATH": os.path.join(TMP, "bin") + ":" + os.environ["PATH"]}
rc, doc = doctor(dict(cuda, FAKE_CUDA_DRIVER="11080"))
c = by_id(doc)["driver"]
expect("driver 11.8 < torch CUDA 12.4: fail, exit 1",
       c["status"] == "fail" and "11.8" in c["finding"] and "12.4" in c["finding"] and rc == 1, doc)
rc, doc = doctor(dict(cuda, FAKE_CUDA_DRIVER="12020"))
expect("driver 12.2 < torch 12.4: warn", by_id(doc)["driver"]["status"] == "warn", doc)
rc, doc = doctor(dict(cuda, FAKE_CUDA_DRIVER="12080"))
c = by_id(doc)
expect("driver 12.8 >= 12.4: ok", c["driver"]["status"] == "ok", doc)
expect("one GPU visible, named", c["gpus"]["status"] == "ok" and "Fake GPU 0" in c["gpus"]["finding"], doc)
expect("idle GPU: gpu_memory ok", c["gpu_memory"]["status"] == "ok"
       and c["gpu_memory"]["details"]["processes_source"] == "nvidia-smi", doc)
expect("VMM supported: ok", c["vmm"]["status"] == "ok", doc)
rc, doc = doctor(dict(cuda, FAKE_SMI_PID="4242"))
c = by_id(doc)["gpu_memory"]
expect("another process on the GPU: warn naming its pid", c["status"] == "warn"
       and "pid 4242 python3" in c["finding"] and "kill" in c["fix"], doc)
rc, doc = doctor(dict(cuda, FAKE_CUDA_FREE_MIB="2000"))
expect("GPU mostly used: warn", by_id(doc)["gpu_memory"]["status"] == "warn", doc)
rc, doc = doctor(dict(cuda, FAKE_CUDA_VMM="0"))
expect("no VMM: warn", by_id(doc)["vmm"]["status"] == "warn", doc)
rc, doc = doctor(dict(cuda, FAKE_CUDA_INIT="100", CUDA_VISIBLE_DEVICES=""))
c = by_id(doc)["gpus"]
expect("CUDA_VISIBLE_DEVICES='' hides every GPU: fail, fix names it", c["status"] == "fail"
       and "CUDA_ERROR_NO_DEVICE" in c["finding"] and "CUDA_VISIBLE_DEVICES" in c["fix"] and rc == 1, doc)

print(f"{len(failures)} failed" if failures else "PASS")
sys.exit(1 if failures else 0)
