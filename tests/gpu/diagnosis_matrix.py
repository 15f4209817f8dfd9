"""The diagnosis matrix: every script of diagnosis_cases.py under `gpumem run` (gpumem's
allocator) and `gpumem run --profile-only`, each with a trace, then `gpumem report --json`
on it (or, in snapshot mode, on the PyTorch memory snapshot of a plain run). Prints a Markdown table: how the run ended, the report's verdict, whether it is
the expected class and its first leak suspect is the `# LEAK` line, and what gpumem said
on stderr while the run was alive: the early warnings (where a leaking case gave any, one
must name that line, and any naming another site before it must have been withdrawn
later) and the verdict at the OOM (judged against the same class where the run died of
one).

usage: diagnosis_matrix.py GPUMEM_CLI [--script FILE] [--cases a,b]
                           [--modes gpumem,profile] [--jsonl FILE] [--timeout SECONDS]
                           [--reports DIR] [--gpus 0,1]
--gpus: the devices to spread the runs over, one run on each at a time (default: one
run at a time on whatever CUDA_VISIBLE_DEVICES allows); 0+1 gives a run both, which
the cases on two GPUs need (elsewhere they say they skipped, exit status 77, not judged).
--script: the case file (default diagnosis_cases.py; hidden_oom_cases.py holds the
out-of-memory errors that libraries raise in their own words). A case file's `list`
prints: name, the verdict expected under profile-only, under gpumem's allocator
("completes": the run ends normally), and the `# LEAK` line (0: none).
"""
import argparse
import concurrent.futures
import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = {"gpumem": ["run", "--"], "profile": ["run", "--profile-only", "--"], "native": [],
         "snapshot": []}
# Snapshot runs are plain Python under PyTorch's own recorder (snapshot_run.py), judged as
# profile-only runs are (PyTorch's allocator made the blocks) on what the report reads
# from the snapshot alone: no step marks, no warnings, no verdict in the dying process.
SNAPSHOT_RUN = os.path.join(HERE, "snapshot_run.py")
# A run that was expected to die of memory outside the allocator but did not (the cache
# happened to leave the libraries enough) is right only if the report says so.
NOT_REPRODUCED = "the run did not die of an OOM it saw"
SKIPPED = 77  # a case this machine cannot run said why on stderr (two GPUs, one visible)


def listed(script):
    out = subprocess.run([sys.executable, script, "list"], capture_output=True, text=True,
                         check=True).stdout
    rows = {}
    for line in out.splitlines():
        name, profile, gpumem, line_no = line.split()
        rows[name] = ({"profile": profile.replace("_", " "), "gpumem": gpumem.replace("_", " ")},
                      int(line_no))
    return rows


REPO = os.path.dirname(os.path.dirname(HERE)) + os.sep


def portable(line, workdir):
    """A stderr line without this machine's paths: the checkout, site-packages, the
    scratch folder and the rest of the temporary folder, where torch.compile writes its
    code (results are committed)."""
    line = line.replace(REPO, "").replace(workdir + os.sep, "$TMP/")
    line = line.replace(tempfile.gettempdir() + os.sep, "$TMPDIR/")
    return re.sub(r"\S*/site-packages/", "site-packages/", line)


def said(stderr, *words):
    for line in stderr.splitlines():
        if line.startswith("gpumem") and all(w in line.lower() for w in words):
            return line
    return ""


def raised(stderr):
    """The exception that ended the run: the last traceback line naming an error."""
    for line in reversed(stderr.splitlines()):
        head = line.split(":", 1)[0]
        if not line.startswith(" ") and head.endswith(("Error", "Exception")):
            return "OOM" if "OutOfMemoryError" in head else line[:120]
    return ""


def said_right_at_oom(expected, ended, at_oom):
    """Whether the dying process named the expected class (None: not judged, where the
    run did not die of an OOM or the class is not one of those judged)."""
    if ended != "OOM" or expected not in ("leak", "genuine peak", "fragmentation",
                                          "memory held outside the allocator"):
        return None
    return f"verdict: {expected}" in at_oom


def names_site(named, site):
    """Whether a site as gpumem names it ("path/file.py:12 function") is file.py:12."""
    where = named.split(" ", 1)[0]
    return where == site or where.endswith("/" + site)


def names_in_oom_evidence(report, site):
    """Whether the OOM that ended the run was a leak whose evidence names the line: one
    told before any step could show growth (a helper thread's kept blocks) has no
    suspect."""
    fatal = next((o for o in report.get("ooms", []) if o.get("ended_the_run")), {})
    words = fatal.get("evidence", "").split()
    return fatal.get("class") == "leak" and any(names_site(w, site) for w in words)


WARNING = re.compile(r"gpumem: leak warning (withdrawn )?at (?:step|pass) \d+: (\S+)"
                     r"(?: [^,]*, called from (\S+))?")


def warned_right(expected, stderr, site):
    """Whether the early leak warnings named the leaking line: the first that names
    another site is right only if it was withdrawn later, as memory that filled up and
    stopped (None: no warning, or the case is not a leak)."""
    said = [(bool(m.group(1)), m.group(2), m.group(3) or "")
            for m in map(WARNING.match, stderr.splitlines()) if m]
    if expected != "leak" or not any(not withdrawn for withdrawn, _, _ in said):
        return None
    named = [(where, call) for withdrawn, where, call in said if not withdrawn]
    first = next((i for i, (where, call) in enumerate(named)
                  if names_site(where, site) or names_site(call, site)), None)
    if first is None:
        return False
    withdrawn = {where for was_withdrawn, where, _ in said if was_withdrawn}
    return all(where in withdrawn for where, _ in named[:first])


def launch(cli, script, mode, case, trace, timeout, gpu=None):
    """(how the run ended, its stderr). Native runs are plain Python, no gpumem at all."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", NCCL_NVLS_ENABLE="0",
               TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu.replace("+", ",")
    if mode not in ("native", "snapshot"):
        env.update(GPUMEM_TRACE=trace, GPUMEM_STACKS="python")
    command = ([cli] + MODES[mode] if MODES[mode] else []) + [sys.executable, script, case]
    if mode == "snapshot":
        command[1:1] = [SNAPSHOT_RUN, trace]
    # A compile cache of its own: a compiled model's first step compiles in every run, as
    # it does in a user's first, and never waits for another mode compiling beside it.
    with tempfile.TemporaryDirectory(prefix="compile-cache-") as cache:
        env.update(TORCHINDUCTOR_CACHE_DIR=cache, TRITON_CACHE_DIR=os.path.join(cache, "triton"))
        try:
            p = subprocess.run(command, env=env, capture_output=True, text=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired as e:  # what it said before, its warnings among it
            said = e.stderr or ""
            return f"timed out after {timeout} s", (said.decode("utf-8", "replace")
                                                    if isinstance(said, bytes) else said)
    if p.returncode == SKIPPED:
        return skipped(p.stderr), p.stderr
    return ("exit 0" if p.returncode == 0 else raised(p.stderr) or f"exit {p.returncode}",
            p.stderr)


def skipped(stderr):
    """How a skipped run ended: its reason, as it said it."""
    reason = next((l for l in stderr.splitlines() if l.startswith("skipped:")), "skipped")
    return reason[:120]


def run(cli, script, mode, case, expectations, leak_line, timeout, workdir, reports="",
        gpu=None):
    # A snapshot is kept with the reports: a trace users bring, for the report's tests.
    where = reports if mode == "snapshot" and reports else workdir
    trace = os.path.join(where, f"{case}-{mode}.{'pickle' if mode == 'snapshot' else 'gpumem'}")
    ended, stderr = launch(cli, script, mode, case, trace, timeout, gpu)
    if mode == "native" or ended.startswith("skipped"):
        return {"case": case, "mode": mode, "expected": "-", "ended": ended, "verdict": "-",
                "ok": None, "warning": "", "at_oom": "",
                "stderr_tail": [portable(l, workdir) for l in stderr.splitlines()[-25:]]}
    return judged(cli, script, mode, case, expectations, leak_line, ended, stderr, trace,
                  workdir, reports)


def right_class_and_site(report, verdict, expected, ended, site):
    """Whether the report's verdict is the expected class, and for a leak whether its
    first suspect (or the OOM's evidence) names the `# LEAK` line."""
    if expected == "completes":
        return ended == "exit 0", True
    # A run that caught its OOMs and went on says so first: "the run did not die of an
    # OOM it saw (...); no leak: ...".
    right_class = verdict.startswith(expected) or expected in verdict.split(";")[0] or \
        (verdict.startswith("the run did not die") and
         verdict.split("; ", 1)[-1].startswith(expected))
    if expected == "no leak":  # and the script itself ran to its end
        right_class = right_class and ended == "exit 0"
    top = (report.get("leak_suspects") or [{}])[0]
    named = [top.get("site", ""), top.get("kept_through", "")]  # the line, or the call keeping it
    right_site = expected != "leak" or any(names_site(n, site) for n in named) or \
        names_in_oom_evidence(report, site)
    return right_class, right_site


def judged(cli, script, mode, case, expectations, leak_line, ended, stderr, trace, workdir,
           reports=""):
    """A run's row: `gpumem report` on its trace, judged, with what it said on stderr."""
    expected = expectations["profile" if mode == "snapshot" else mode]
    if expected == "out of memory outside the allocator" and ended == "exit 0":
        expected = NOT_REPRODUCED
    r = subprocess.run([cli, "report", "--json", trace], capture_output=True, text=True)
    if reports:
        with open(os.path.join(reports, f"{case}-{mode}.json"), "w") as f:
            f.write(r.stdout or r.stderr)
        with open(os.path.join(reports, f"{case}-{mode}.stderr"), "w") as f:
            f.write(portable(stderr, workdir))
    report = json.loads(r.stdout) if r.returncode == 0 else {}
    verdict = report.get("verdict", "") if r.returncode == 0 else r.stderr.strip()
    site = f"{os.path.basename(script)}:{leak_line}"
    right_class, right_site = right_class_and_site(report, verdict, expected, ended, site)
    # Paths made portable before the cut, which could split one.
    at_oom = portable(said(stderr, "verdict:"), workdir)[:160]
    warning = portable(said(stderr, "leak warning"), workdir)[:160]
    return {"case": case, "mode": mode, "expected": expected, "ended": ended,
            "verdict": verdict, "ok": bool(right_class and right_site),
            "ok_at_oom": None if mode == "snapshot" else said_right_at_oom(expected, ended, at_oom),
            "warning": warning, "ok_warning": warned_right(expected, stderr, site),
            "warnings_said": sum(l.startswith("gpumem: leak warning at")
                                 for l in stderr.splitlines()),
            "at_oom": at_oom, "steps": report.get("steps", {}).get("detail", ""),
            "cache_pressure": (report.get("cache_pressure") or {}).get("ratio"),
            "stderr_tail": [portable(l, workdir) for l in stderr.splitlines()[-25:]]}


def rejudged(cli, script, cases, old_rows, snapshots):
    """The snapshot rows of an earlier run judged again by `cli`'s report, on the snapshots
    that run kept (its reports folder): a change to the report checked with no GPU."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpumem-rejudge-") as workdir:
        for old in old_rows:
            trace = os.path.join(snapshots, f"{old['case']}-snapshot.pickle")
            if old["mode"] != "snapshot" or old["expected"] == "-" or not os.path.exists(trace):
                continue
            rows.append(judged(cli, script, "snapshot", old["case"], *cases[old["case"]],
                               old["ended"], "", trace, workdir))
    return rows


RIGHT = {True: "yes", False: "NO", None: "-"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cli")
    ap.add_argument("--script", default=os.path.join(HERE, "diagnosis_cases.py"))
    ap.add_argument("--cases", default="")
    ap.add_argument("--modes", default="gpumem,profile",
                    help="any of gpumem, profile, snapshot (plain Python under PyTorch's "
                         "memory recorder, its snapshot reported; kept in --reports) and "
                         "native (plain Python: how the run ends without gpumem; not "
                         "judged)")
    ap.add_argument("--jsonl", default="")
    ap.add_argument("--timeout", type=int, default=150)
    ap.add_argument("--reports", default="",
                    help="folder to keep each report's JSON and each run's stderr in")
    ap.add_argument("--gpus", default="", help="devices to spread the runs over, e.g. 0,1")
    ap.add_argument("--rejudge", default="", metavar="JSONL",
                    help="run nothing: judge again the snapshot rows of an earlier run's "
                         "--jsonl, on the snapshots its --reports folder kept (give that "
                         "folder as --reports)")
    args = ap.parse_args()
    cases = listed(args.script)
    if args.rejudge:
        with open(args.rejudge) as f:
            old_rows = [json.loads(line) for line in f if line.strip()]
        return print_table(rejudged(args.cli, args.script, cases, old_rows, args.reports))
    names = args.cases.split(",") if args.cases else list(cases)
    workdir = tempfile.mkdtemp(prefix="gpumem-diagnosis-")
    out = open(args.jsonl, "w") if args.jsonl else None
    gpus, written = queue.Queue(), threading.Lock()
    for gpu in (args.gpus.split(",") if args.gpus else [None]):
        gpus.put(gpu)

    def run_on_a_free_gpu(name, mode):
        gpu = gpus.get()
        try:
            row = run(args.cli, args.script, mode, name, *cases[name], args.timeout,
                      workdir, args.reports, gpu)
        finally:
            gpus.put(gpu)
        with written:  # as each ends, so a run cut short keeps what was done
            print(json.dumps(row), file=sys.stderr, flush=True)
            if out:
                out.write(json.dumps(row) + "\n")
                out.flush()
        return row

    with concurrent.futures.ThreadPoolExecutor(gpus.qsize()) as pool:
        runs = [pool.submit(run_on_a_free_gpu, name, mode)
                for name in names for mode in args.modes.split(",")]
        rows = [r.result() for r in runs]  # the table in the order asked
    return print_table(rows)


def print_table(rows):
    """The Markdown table and its totals; 1 where any judgement is wrong."""
    print("| case | mode | ended | verdict | right | early warning | right "
          "| said at the OOM | right |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['mode']} | {r['ended']} | {r['verdict'][:90]} | "
              f"{RIGHT[r['ok']]} | {r['warning'][:60]} | {RIGHT[r.get('ok_warning')]} | "
              f"{r['at_oom'][:60]} | {RIGHT[r.get('ok_at_oom')]} |")
    judgements = [r[k] for r in rows for k in ("ok", "ok_at_oom", "ok_warning")
                  if r.get(k) is not None]
    wrong = judgements.count(False)
    judged_count = len(judgements)
    print(f"\n{judged_count - wrong} passed, {wrong} failed")
    print(false_alarms(rows))
    return 1 if wrong else 0


def false_alarms(rows):
    """The early warnings said where the case keeps nothing from step to step: not judged
    (a pass that gathers its outputs looks like a leak until it gives them back), but
    counted, so that they are seen."""
    judged = [r for r in rows if r["expected"] not in ("leak", "-")]
    warned = sorted({r["case"] for r in judged if r["warning"]})
    runs = sum(bool(r["warning"]) for r in judged)
    return (f"early warnings where nothing leaks: {runs} of {len(judged)} runs"
            + (f" ({', '.join(warned)})" if warned else ""))


if __name__ == "__main__":
    sys.exit(main())
