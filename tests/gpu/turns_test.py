"""turns.fifo_turns without a GPU: stand-ins for two torchrun jobs' ranks (two ranks a
job) take turns through FIFOs, rank r of one job with rank r of the other; a partner that
dies leaves the other to run alone; a partner that never comes is an error, not a hang."""
import os
import subprocess
import sys
import tempfile
import unittest

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
from turns import fifo_turns  # noqa: E402

# A rank of a job: each step appends "role step" to its rank's log (a rank's log is the
# order its GPU would see), as multi_gpu_train.py's loop takes turns.
RANK = r'''
import sys
sys.path.insert(0, HERE)
from turns import fifo_turns
spec, rank, steps, crash_at, log = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
turns, first = fifo_turns(spec, rank)
if not first:
    turns.wait(0)
for step in range(steps):
    if step == crash_at:
        sys.exit(1)
    with open(log, "a") as f:
        f.write(spec.split(",")[1] + f" {step}\n")
    if (step + 1) % turns.steps == 0:
        turns.pass_and_wait(step + 1)
print(turns.alone_from)
'''


def run_jobs(folder, steps=6, turn_steps=2, crash=None):
    """Both jobs' ranks at once; their printed alone_from, by (role, rank)."""
    procs = {}
    for role in ("baseline", "candidate"):
        for rank in (0, 1):
            crash_at = crash[1] if crash and crash[0] == (role, rank) else -1
            procs[role, rank] = subprocess.Popen(
                [sys.executable, "-c", RANK.replace("HERE", repr(here)),
                 f"{folder},{role},{turn_steps}", str(rank), str(steps), str(crash_at),
                 os.path.join(folder, f"log{rank}")],
                stdout=subprocess.PIPE, text=True)
    return {k: p.communicate(timeout=60)[0].strip() for k, p in procs.items()}


def log(folder, rank):
    with open(os.path.join(folder, f"log{rank}")) as f:
        return [line.split() for line in f.read().splitlines()]


class FifoTurns(unittest.TestCase):
    def test_each_rank_alternates_blocks_with_its_partner(self):
        with tempfile.TemporaryDirectory() as folder:
            run_jobs(folder)
            for rank in (0, 1):
                roles = [role for role, _ in log(folder, rank)]
                self.assertEqual(roles, ["baseline"] * 2 + ["candidate"] * 2
                                 + ["baseline"] * 2 + ["candidate"] * 2
                                 + ["baseline"] * 2 + ["candidate"] * 2)

    def test_a_partner_that_dies_leaves_the_other_alone(self):
        with tempfile.TemporaryDirectory() as folder:
            alone = run_jobs(folder, steps=8, crash=(("candidate", 1), 3))
            # Rank 1's baseline ran its blocks after the crash alone, to the end.
            self.assertEqual([s for role, s in log(folder, 1) if role == "baseline"],
                             [str(i) for i in range(8)])
            self.assertEqual(alone["baseline", 1], "4")
            self.assertEqual(alone["baseline", 0], "None")

    def test_a_partner_that_never_comes_is_an_error(self):
        with tempfile.TemporaryDirectory() as folder:
            with self.assertRaisesRegex(TimeoutError, "did not open"):
                fifo_turns(f"{folder},baseline,2", 0, open_timeout_s=1)

    def test_bad_spec(self):
        with self.assertRaises(ValueError):
            fifo_turns("folder,referee,2", 0)
        with self.assertRaises(ValueError):
            fifo_turns("folder", 0)


if __name__ == "__main__":
    unittest.main()
