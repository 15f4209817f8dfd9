"""pool_turns.py on made-up rows (no GPU): each setting is paired with the native job it
took turns with, named or (older files) by order, and the blocks of several runs pool."""
import json
import os
import statistics
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pool_turns as p  # noqa: E402
from multi_gpu_matrix import map_parts_text, pooled_map_step_parts  # noqa: E402


def row(mode, time, against=None, rank=0, steps=40):
    r = {"layout": "fsdp2", "rank": rank, "mode": mode, "round": 0, "turn_steps": 10,
         "warmup": 0, "step_times": [time] * steps, "alone_from_step": None}
    if against is not None:
        r["against"] = against
    return r


class Pairing(unittest.TestCase):
    def test_named_partners(self):
        rows = [row("native", 0.10, "gpumem"), row("native", 0.10, "gpumem", rank=1),
                row("gpumem", 0.12), row("page8m", 0.21), row("native", 0.20, "page8m")]
        (n, g), = p.partner_pairs(rows, "gpumem", "fsdp2")
        self.assertEqual((n["step_times"][0], g["step_times"][0]), (0.10, 0.12))
        (n, v), = p.partner_pairs(rows, "page8m", "fsdp2")
        self.assertEqual((n["step_times"][0], v["step_times"][0]), (0.20, 0.21))

    def test_order_for_files_without_names(self):
        # gpumem's native job is written before it, a variant's after it.
        rows = [row("native", 0.10), row("gpumem", 0.11), row("page8m", 0.33),
                row("native", 0.30)]
        self.assertEqual(p.partner_pairs(rows, "gpumem", "fsdp2")[0][0]["step_times"][0], 0.10)
        self.assertEqual(p.partner_pairs(rows, "page8m", "fsdp2")[0][0]["step_times"][0], 0.30)
        self.assertEqual(p.partner_pairs(rows, "page8m", "ddp"), [])


class Pooling(unittest.TestCase):
    def test_blocks_of_every_run_pool(self):
        paths = []
        with tempfile.TemporaryDirectory() as d:
            for k, time in enumerate((0.11, 0.09)):
                path = os.path.join(d, f"run{k}.jsonl")
                with open(path, "w") as f:
                    for r in (row("native", 0.10, "gpumem"), row("gpumem", time)):
                        print(json.dumps(r), file=f)
                paths.append((path, "gpumem"))
            per_file = p.pooled(p.load_runs(paths, "fsdp2"))
        self.assertEqual([len(r) for _, _, r in per_file], [4, 4])  # 40 steps, blocks of 10
        self.assertAlmostEqual(per_file[0][2][0], 1.1)
        self.assertAlmostEqual(per_file[1][2][0], 0.9)

    def test_steps_by_which_ranks_mapped_pool(self):
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for k in range(2):
                path = os.path.join(d, f"run{k}.jsonl")
                ranks = [row("gpumem", 0.10, rank=rank) for rank in (0, 1)]
                for r in ranks:
                    r["step_maps"] = [0] * 40
                ranks[1]["step_maps"][5] = 7  # rank 1 maps in step 5: rank 0 waits
                ranks[0]["step_times"][5] = 0.11
                natives = [row("native", 0.10, "gpumem"), row("native", 0.2, "gpumem", rank=1)]
                with open(path, "w") as f:
                    for r in natives + ranks:
                        print(json.dumps(r), file=f)
                paths.append((path, "gpumem"))
            parts = p.pooled_rank_map_parts(p.load_runs(paths, "fsdp2"))
        self.assertEqual([len(s) for s in parts.values()], [70, 0, 2])  # 4 blocks of 9, twice
        self.assertAlmostEqual(parts["only other ranks mapped"][0][0], 1.1)

    def test_median_step_and_long_steps(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "run.jsonl")
            gpumem = row("gpumem", 0.10)
            gpumem["step_times"][3] = 0.5  # a long step in the first block
            with open(path, "w") as f:
                for r in (row("native", 0.10, "gpumem"), gpumem):
                    print(json.dumps(r), file=f)
            runs = p.load_runs([(path, "gpumem")], "fsdp2")
            (_, _, by_time), = p.pooled(runs)
            (_, _, by_median), = p.pooled(runs, statistics.median)
            counts = p.long_step_counts(runs)
        self.assertAlmostEqual(by_time[0], 1.3 / 0.9)
        self.assertEqual(by_median, [1.0] * 4)
        self.assertEqual(counts, (0, 1, 40))

    def test_steps_with_maps_pool(self):
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for k, mapped in enumerate(({2: 0.11, 12: 0.11}, {5: 0.12})):
                gpumem = row("gpumem", 0.10)
                gpumem["step_maps"] = [0] * 40
                for i, t in mapped.items():
                    gpumem["step_maps"][i] = 3
                    gpumem["step_times"][i] = t
                path = os.path.join(d, f"run{k}.jsonl")
                with open(path, "w") as f:
                    for r in (row("native", 0.10, "gpumem"), gpumem):
                        print(json.dumps(r), file=f)
                paths.append((path, "gpumem"))
            runs = p.load_runs(paths, "fsdp2")
            parts = pooled_map_step_parts(pair for _, _, pairs, _ in runs for pair in pairs)
        # 4 blocks of 10 a run, each block's first step left out: 36 steps a run.
        self.assertEqual([len(parts[k]) for k in ("with maps", "without")], [3, 69])
        text = map_parts_text(parts, "the other")
        self.assertIn("without 69 steps, the other/native 1.000 [1.000, 1.000]", text)
        self.assertIn("with maps 3 steps, the other/native 1.13", text)


if __name__ == "__main__":
    unittest.main()
