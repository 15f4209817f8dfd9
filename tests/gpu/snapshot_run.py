"""Runs a script unchanged under PyTorch's own memory recorder, the way PyTorch's page
"Understanding CUDA Memory Usage" tells users to: `_record_memory_history` before the
script starts, `_dump_snapshot` when it ends, however it ends (an out-of-memory error
among them). No gpumem in the process: the snapshot is what `gpumem report` reads
offline, as a user brings it.

usage: snapshot_run.py SNAPSHOT.pickle [--max-entries N] SCRIPT [ARGS...]
--max-entries: the recorder's ring (default 100000, the figure PyTorch's page uses; a long
run's snapshot then starts mid-run, as users' do).
SNAPSHOT_STACKS: the recorder's stacks, "python" (default) or "all" (Python and C++ frames,
PyTorch's own default).
"""
import os
import runpy
import sys

import torch


def main():
    args = sys.argv[1:]
    if len(args) < 2 or args[0].startswith("-"):
        sys.exit(__doc__)
    snapshot, args = args[0], args[1:]
    max_entries = 100000
    if args[0] == "--max-entries":
        max_entries, args = int(args[1]), args[2:]
    script = args[0]
    sys.argv = args
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    torch.cuda.memory._record_memory_history(max_entries=max_entries,
                                            stacks=os.environ.get("SNAPSHOT_STACKS", "python"))
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        torch.cuda.memory._dump_snapshot(snapshot)


if __name__ == "__main__":
    main()
