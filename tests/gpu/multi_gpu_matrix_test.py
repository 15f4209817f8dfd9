"""multi_gpu_matrix.py's judgement on made-up rank rows (no GPU): losses compared at rank
0, a rank whose figures are another device's or not gpumem's is wrong, peak reserved /
allocated above 1.02 fails, step time from paired rounds."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import multi_gpu_matrix as m  # noqa: E402

GiB = 1 << 30


def row(rank, mode, losses=(3.0, 2.5), time=0.1, device=None, allocated=GiB, gpumem=None,
        peak_allocated=4 * GiB, peak_reserved=4 * GiB):
    r = {"rank": rank, "world": 2, "mode": mode, "losses": list(losses),
         "step_times": [time] * 5, "device": rank if device is None else device,
         "allocated": allocated, "peak_allocated": peak_allocated,
         "peak_reserved": peak_reserved, "driver_used": 5 * GiB}
    if mode == "gpumem":
        r["gpumem_allocated"] = allocated if gpumem is None else gpumem
    return r


def pair(time=0.1, **gpumem_rank1):
    native = [row(0, "native"), row(1, "native")]
    gpumem = [row(0, "gpumem", time=time), row(1, "gpumem", **gpumem_rank1)]
    return native, gpumem


class Judgement(unittest.TestCase):
    def test_rounds_compare_the_same_steps(self):
        # Long and short batches at the same steps in both runs: the time of all of them.
        self.assertAlmostEqual(m.run_time_ratio([0.2, 0.05, 0.05], [0.21, 0.05, 0.06]),
                               0.32 / 0.30)
        # A run cut short: medians.
        self.assertAlmostEqual(m.run_time_ratio([0.1, 0.2, 0.3], [0.4]), 2.0)

    def test_all_right(self):
        text, ok = m.summarize("fsdp2", [pair(), pair(0.1)])
        self.assertTrue(ok, text)
        self.assertIn("same losses", text)
        self.assertIn("time of the timed steps gpumem/native over 2 rounds: 1.000", text)

    def test_other_losses(self):
        native, gpumem = pair()
        gpumem[0]["losses"] = [3.0, 2.0]
        _, ok = m.summarize("ddp", [(native, gpumem)])
        self.assertFalse(ok)

    def test_rank_reporting_device_zero(self):
        text, ok = m.summarize("ddp", [pair(device=0)])
        self.assertFalse(ok)
        self.assertIn("rank 1: figures right NO", text)

    def test_torch_api_not_gpumem_figures(self):
        _, ok = m.summarize("tp", [pair(gpumem=0)])
        self.assertFalse(ok)

    def test_reserved_over_allocated_limit(self):
        _, ok = m.summarize("tp", [pair(peak_reserved=int(4.2 * GiB))])
        self.assertFalse(ok)

    def test_no_gpumem_rows(self):
        _, ok = m.summarize("ddp", [([row(0, "native")], [])])
        self.assertFalse(ok)

    def test_slower_step_time(self):
        text, _ = m.summarize("ddp", [pair(0.12), pair(0.121), pair(0.119)])
        self.assertIn("within 1%: NOT MET", text)

    def test_variant_against_its_rounds_native(self):
        rounds = [pair(), pair()]
        variant = [[row(0, "gpumem", time=0.12), row(1, "gpumem")] for _ in rounds]
        for rows in variant:
            for r in rows:
                r["gpumem_stats"] = {"stitch_count": 0}
                r["backend_counters"] = {"maps": 10, "stream_waits": 0, "synchronizes": 0}
        text = m.summarize_variant("nostitch", [(native, rows) for (native, _), rows
                                                in zip(rounds, variant)])
        self.assertIn("time of the timed steps nostitch/native over 2 rounds: 1.200", text)
        self.assertIn("nostitch's device calls per step", text)
        self.assertIn("maps 5.0-5.0", text)  # 10 maps over 2 steps
        for rows in variant:
            for r in rows:  # 5 timed steps after the warm-up: 4 maps, 2 ms in the driver
                r["timed_counters"] = {"maps": 4, "host_call_ns": 2_000_000,
                                       "background_call_ns": 1_000_000}
        text = m.summarize_variant("nostitch", [(native, rows) for (native, _), rows
                                                in zip(rounds, variant)])
        self.assertIn("per timed step (after the warm-up): maps 0.8-0.8; unmaps 0.0-0.0; "
                      "page creates 0.0-0.0; stream waits 0.0-0.0; ms in driver calls "
                      "0.40-0.40; ms in gpumem's thread 0.20-0.20", text)

    def test_turns_compare_each_block_with_natives_same_steps(self):
        # Steps 10.. timed, blocks of 4 from step 12; a block's first step is left out.
        native = {"turn_steps": 4, "warmup": 10, "step_times": [9, 9] + [1, 2, 2, 2] * 3}
        gpumem = {"turn_steps": 4, "warmup": 10, "step_times": [9, 9] + [5, 2, 2, 4] * 3}
        self.assertEqual(m.turn_block_ratios(native, gpumem), [8 / 6] * 3)
        # Blocks after one job ran alone do not count.
        gpumem["alone_from_step"] = 20
        self.assertEqual(m.turn_block_ratios(native, gpumem), [8 / 6] * 2)

    def test_turns_verdict_pools_the_blocks_of_every_round(self):
        rounds = []
        for slow in (1.0, 1.1):
            native, gpumem = pair()
            for r in native + gpumem:
                r.update(turn_steps=2, warmup=0, step_times=[0.1] * 8, driver_used=None)
            for r in gpumem:
                r["step_times"] = [0.1, 0.1 * slow] * 4
            rounds.append((native, gpumem))
        text, _ = m.summarize("fsdp2", rounds)
        self.assertIn("over 8 blocks of turns in 2 rounds", text)
        self.assertIn("each round: 1.000, 1.050", text)
        self.assertIn("driver in use shared by both jobs", text)

    def test_median_of_each_block_leaves_one_long_step_out(self):
        native, gpumem = pair()
        for r in native + gpumem:
            r.update(turn_steps=4, warmup=0, step_times=[0.1] * 16, driver_used=None)
        gpumem[0]["step_times"][5] = 0.3  # one long step in the second block
        text, _ = m.summarize("fsdp2", [(native, gpumem)])
        self.assertIn("over 4 blocks of turns in 1 rounds: 1.136", text)  # (5/3)^(1/4)
        self.assertIn("median step of each block gpumem/native: 1.000 [1.000, 1.000]; "
                      "within 1%: MET", text)
        self.assertIn("steadiness, rank 0, percentiles 50/90/95/99: native 100/100/100/100 "
                      "ms, 0 of 16 steps over 1.2x the median; gpumem 100/100/", text)
        self.assertIn("1 of 16 steps over 1.2x the median", text)

    def test_steps_with_maps_against_natives_same_steps(self):
        native, gpumem = pair()
        for r in native + gpumem:
            r.update(turn_steps=4, warmup=0, step_times=[0.1] * 16, driver_used=None)
        # gpumem maps pages at steps 1 and 5, which take 10% longer; step 9 is long.
        gpumem[0]["step_maps"] = [0, 3, 0, 0, 0, 2] + [0] * 10
        for i in (1, 5):
            gpumem[0]["step_times"][i] = 0.11
        gpumem[0]["step_times"][9] = 0.5
        line = m.map_steps_line([(native, gpumem)])
        self.assertIn("with maps 2 steps, gpumem/native 1.100 [1.100, 1.100], long steps 0 "
                      "(gpumem) / 0 (native)", line)
        self.assertIn("without 10 steps, gpumem/native 1.175", line)  # 5^(1/10)
        self.assertIn("long steps 1 (gpumem) / 0 (native)", line)
        del gpumem[0]["step_maps"]  # rows from before step_maps: no line
        self.assertIsNone(m.map_steps_line([(native, gpumem)]))

    def test_steps_by_which_ranks_mapped(self):
        native, gpumem = pair()
        for r in native + gpumem:
            r.update(turn_steps=4, warmup=0, step_times=[0.1] * 16, driver_used=None,
                     step_maps=[0] * 16)
        # Rank 0 maps at step 1, rank 1 at steps 2 and 5: rank 0 waits for it there.
        gpumem[0]["step_maps"][1] = 3
        for i in (2, 5):
            gpumem[1]["step_maps"][i] = 4
        for i in (1, 2, 5):
            gpumem[0]["step_times"][i] = 0.11
        line = m.rank_map_steps_line([(native, gpumem)])
        self.assertIn("no rank mapped 9 steps, gpumem/native 1.000", line)
        self.assertNotIn("rank 0 mapped", line)  # one step: no interval
        self.assertIn("only other ranks mapped 2 steps, gpumem/native 1.100", line)
        self.assertEqual([len(p) for p in m.rank_map_step_parts(native, gpumem).values()],
                         [9, 1, 2])  # step 0, 4, 8 and 12 begin a block: left out
        del gpumem[1]["step_maps"]  # a rank without step_maps: no line
        self.assertIsNone(m.rank_map_steps_line([(native, gpumem)]))

    def test_device_calls_of_long_steps(self):
        native, gpumem = pair()
        for r in native + gpumem:
            r.update(step_times=[0.1] * 4)
        gpumem[0]["step_times"][3] = 0.2  # the one long step unmapped 8 pages
        gpumem[0]["step_calls"] = {
            "maps": [2, 0, 1, 3], "unmaps": [0, 0, 2, 8], "stream_waits": [30, 30, 30, 30],
            "synchronizes": [0, 0, 0, 1], "host_call_ns": [3e6, 0, 0, 1e6],
            "background_call_ns": [0, 0, 1e5, 4e5]}
        self.assertEqual(
            m.long_step_calls_line([(native, gpumem)]),
            "- gpumem's device calls a step, rank 0: 1 long steps maps 3.0, unmaps 8.0 (100% "
            "of steps), stream waits 30.0, synchronizes 1.00, host in calls 1.00 ms, "
            "background 0.40 ms; 3 others maps 1.0, unmaps 0.7 (33% of steps), stream waits "
            "30.0, synchronizes 0.00, host in calls 1.00 ms, background 0.03 ms")
        del gpumem[0]["step_calls"]  # rows from before step_calls: no line
        self.assertIsNone(m.long_step_calls_line([(native, gpumem)]))

    def test_long_steps_by_phase(self):
        native, gpumem = pair()
        normal = {"device": {"forward": 30.0, "backward": 60.0},
                  "host": {"forward": 5.0, "backward": 2.0}}
        slow = {"device": {"forward": 30.0, "backward": 110.0},
                "host": {"forward": 5.0, "backward": 52.0}}
        for r in native + gpumem:
            r.update(step_times=[0.1] * 6, phases=[normal] * 6)
        gpumem[0]["step_times"][2] = 0.15
        gpumem[0]["phases"] = [normal] * 2 + [slow] + [normal] * 3
        self.assertEqual(m.phase_line([(native, gpumem)]),
                         "- long steps over the others by phase, rank 0, device/host ms: "
                         "gpumem (1 long) forward +0.0/+0.0, backward +50.0/+50.0")
        del native[0]["phases"]  # rows from before the clock: no line
        self.assertIsNone(m.phase_line([(native, gpumem)]))

    def test_collections_of_each_job(self):
        native, gpumem = pair()
        native[0].update(gc_ms=[0, 60, 0, 0, 1], gc_collections=[9, 3, 1])
        gpumem[0].update(gc_ms=[0, 0, 0, 0, 0], gc_collections=[9, 3, 0])
        text, _ = m.summarize("fsdp2", [(native, gpumem)])
        self.assertIn("Python's collections in the timed steps, rank 0: native 12.20 ms a "
                      "step, 1 full, 1 steps over 10 ms; gpumem 0.00 ms a step, 0 full, 0 "
                      "steps over 10 ms", text)
        del native[0]["gc_ms"]  # rows from before the clock: no line
        self.assertNotIn("collections", m.summarize("fsdp2", [(native, gpumem)])[0])

    def test_variant_text(self):
        self.assertEqual(m.parse_variant("nostitch:GPUMEM_STITCH=0,GPUMEM_THREAD_CACHE=0"),
                         ("nostitch", {"GPUMEM_STITCH": "0", "GPUMEM_THREAD_CACHE": "0"}))
        with self.assertRaises(SystemExit):
            m.parse_variant("nostitch")


if __name__ == "__main__":
    unittest.main()
