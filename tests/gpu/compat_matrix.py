"""The compatibility matrix: every case of compat_cases.py under PyTorch's own allocator
(native), under `gpumem run` (gpumem's allocator) and under `gpumem run --profile-only`,
each in a process of its own. Prints a Markdown table (pass / FAIL / skip per mode, and the
figures that differ) and writes every row as JSON lines.

usage: compat_matrix.py GPUMEM_CLI [--cases a,b] [--modes native,gpumem,profile]
                        [--jsonl FILE] [--timeout SECONDS]
A snapshot taken under gpumem is also read back with `gpumem report` (row history_snapshot).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "compat_cases.py")
MODES = {"native": [], "gpumem": ["run", "--"], "profile": ["run", "--profile-only", "--"]}


def run_case(cli, mode, case, timeout, workdir):
    env = dict(os.environ, PYTHONUNBUFFERED="1", NCCL_NVLS_ENABLE="0",
               TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    snapshot = os.path.join(workdir, f"{mode}-{case}.pickle")
    env["COMPAT_SNAPSHOT_OUT"] = snapshot
    env["GPUMEM_TRACE"] = os.path.join(workdir, f"{mode}-{case}.gpumem")
    cmd = [sys.executable, CASES, case]
    if mode != "native":
        cmd = [cli] + MODES[mode] + cmd
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                           cwd=workdir)
    except subprocess.TimeoutExpired:
        return {"case": case, "mode": mode, "ok": False, "detail": f"timed out after {timeout} s"}
    row = None
    for line in p.stdout.splitlines():
        try:
            parsed = json.loads(line)
        except ValueError:
            continue  # a library's own output (a trainer's log dict, say)
        if isinstance(parsed, dict) and parsed.get("case") == case:
            row = parsed
    if row is None:
        lines = p.stderr.strip().splitlines() or ["no output"]
        return {"case": case, "mode": mode, "ok": False,
                "detail": f"exit {p.returncode}: {lines[-1]}", "stderr_tail": lines[-40:]}
    row["mode"] = mode
    if case == "history_snapshot" and mode == "gpumem" and os.path.exists(snapshot):
        r = subprocess.run([cli, "report", snapshot], capture_output=True, text=True)
        row["gpumem_report_reads_it"] = r.returncode == 0
        row["ok"] = row["ok"] and r.returncode == 0
    return row


def cell(row):
    if row["ok"] is None:
        return "skip"
    return "pass" if row["ok"] else "FAIL"


def figures(row):
    skip = {"case", "mode", "ok"}
    return ", ".join(f"{k}={v}" for k, v in row.items() if k not in skip)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cli", help="the gpumem command (build/bin/gpumem)")
    ap.add_argument("--cases", default="")
    ap.add_argument("--modes", default="native,gpumem,profile")
    ap.add_argument("--jsonl", default="")
    ap.add_argument("--timeout", type=int, default=300)
    args = ap.parse_args()
    names = args.cases.split(",") if args.cases else subprocess.run(
        [sys.executable, CASES, "list"], capture_output=True, text=True, check=True
    ).stdout.split()
    modes = args.modes.split(",")
    workdir = tempfile.mkdtemp(prefix="gpumem-compat-")
    rows = []
    out = open(args.jsonl, "w") if args.jsonl else None
    for case in names:
        for mode in modes:
            row = run_case(args.cli, mode, case, args.timeout, workdir)
            rows.append(row)
            print(json.dumps(row, default=str), file=sys.stderr, flush=True)
            if out:
                out.write(json.dumps(row, default=str) + "\n")
                out.flush()
    print("| case | " + " | ".join(modes) + " | figures (gpumem) |")
    print("|---|" + "---|" * len(modes) + "---|")
    failed = 0
    for case in names:
        mine = [r for r in rows if r["case"] == case]
        by_mode = {r["mode"]: r for r in mine}
        cells = [cell(by_mode[m]) for m in modes]
        failed += sum(c == "FAIL" for c in cells)
        shown = by_mode.get("gpumem", mine[0])
        print(f"| {case} | " + " | ".join(cells) + f" | {figures(shown)} |")
    print(f"\n{len(rows) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
