"""diagnosis_matrix.py's judgements of a leaking case: the first leak suspect must be the
`# LEAK` line itself (not a frame elsewhere in the report), and an early warning, where
there was one, must name that line too; a line number is never taken for its prefix."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import diagnosis_matrix as m  # noqa: E402

SITE = "diagnosis_cases.py:37"


class NamesSite(unittest.TestCase):
    def test_the_line_under_any_folder(self):
        self.assertTrue(m.names_site("tests/gpu/diagnosis_cases.py:37 fn", SITE))
        self.assertTrue(m.names_site("diagnosis_cases.py:37 fn.<locals>.g", SITE))

    def test_another_line_or_file(self):
        self.assertFalse(m.names_site("tests/gpu/diagnosis_cases.py:374 fn", SITE))
        self.assertFalse(m.names_site("tests/gpu/my_diagnosis_cases.py:37 fn", SITE))
        self.assertFalse(m.names_site("$TMPDIR/torchinductor_root/sr/c.py:183 Runner.call", SITE))
        self.assertFalse(m.names_site("", SITE))


class NamedInOomEvidence(unittest.TestCase):
    def report(self, cls, evidence, ended=True):
        return {"ooms": [{"class": "peak", "evidence": f"at {SITE} x", "ended_the_run": False},
                         {"class": cls, "evidence": evidence, "ended_the_run": ended}]}

    def test_the_line_in_the_evidence_of_the_leak_that_ended_the_run(self):
        self.assertTrue(m.names_in_oom_evidence(
            self.report("leak", f"a thread other than the loop's kept 406 blocks (3.17 GiB) "
                                f"at tests/gpu/{SITE} load, which the loop had not taken"), SITE))

    def test_not_in_another_class_another_oom_or_at_another_line(self):
        self.assertFalse(m.names_in_oom_evidence(self.report("fragmentation", f"at {SITE} f"), SITE))
        self.assertFalse(m.names_in_oom_evidence(self.report("leak", f"at {SITE} f", False), SITE))
        self.assertFalse(m.names_in_oom_evidence(self.report("leak", f"at {SITE}4 f"), SITE))
        self.assertFalse(m.names_in_oom_evidence({}, SITE))


class Launch(unittest.TestCase):
    def launch(self, source, timeout, runs=1):
        """(how it ended, its stderr) for each of `runs` runs of a script of `source`."""
        with m.tempfile.TemporaryDirectory() as d:
            script = os.path.join(d, "case.py")
            with open(script, "w") as f:
                f.write(source)
            return [m.launch("unused", script, "native", "case", "", timeout=timeout)
                    for _ in range(runs)]

    def test_a_run_cut_by_its_timeout_keeps_what_it_said(self):
        [(ended, stderr)] = self.launch(
            "import sys, time\n"
            "print('gpumem: leak warning at step 7: x.py:1 f', file=sys.stderr)\n"
            "sys.stderr.flush()\n"
            "time.sleep(60)\n", timeout=3)
        self.assertEqual(ended, "timed out after 3 s")
        self.assertIn("gpumem: leak warning at step 7", stderr)

    def test_each_run_compiles_in_a_cache_of_its_own(self):
        said = [stderr.split() for _, stderr in self.launch(
            "import os, sys\n"
            "cache = os.environ['TORCHINDUCTOR_CACHE_DIR']\n"
            "print(cache, os.path.isdir(cache), file=sys.stderr)\n", timeout=30, runs=2)]
        self.assertEqual([s[1] for s in said], ["True", "True"])
        self.assertNotEqual(said[0][0], said[1][0])
        self.assertFalse(os.path.exists(said[0][0]))  # gone with its run


    def test_a_case_this_machine_cannot_run_says_why_and_is_not_judged(self):
        with m.tempfile.TemporaryDirectory() as d:
            script, cli = os.path.join(d, "case.py"), os.path.join(d, "gpumem")
            with open(script, "w") as f:
                f.write("import sys\n"
                        "print('skipped: needs two GPUs, 1 visible', file=sys.stderr)\n"
                        "sys.exit(77)\n")
            with open(cli, "w") as f:  # `gpumem run -- COMMAND` runs COMMAND
                f.write("#!/bin/sh\nshift 2\nexec \"$@\"\n")
            os.chmod(cli, 0o755)
            row = m.run(cli, script, "gpumem", "case", {"gpumem": "leak"}, 1, 30, d)
        self.assertEqual(row["ended"], "skipped: needs two GPUs, 1 visible")
        self.assertIsNone(row["ok"])

    def test_a_run_given_two_gpus_sees_both(self):
        with m.tempfile.TemporaryDirectory() as d:
            script = os.path.join(d, "case.py")
            with open(script, "w") as f:
                f.write("import os, sys\nprint(os.environ['CUDA_VISIBLE_DEVICES'], file=sys.stderr)\n")
            _, stderr = m.launch("unused", script, "native", "case", "", timeout=30, gpu="0+1")
        self.assertEqual(stderr.strip(), "0,1")


class Rejudged(unittest.TestCase):
    """An earlier run's snapshot rows judged again by another report, with no GPU."""

    def test_kept_snapshots_judged_again_and_the_rest_left_out(self):
        with m.tempfile.TemporaryDirectory() as d:
            cli = os.path.join(d, "gpumem")
            with open(cli, "w") as f:  # `gpumem report --json FILE`: a leak at line 37
                f.write("#!/bin/sh\n"
                        "echo '{\"verdict\": \"out of memory in step 9: leak\", "
                        "\"leak_suspects\": [{\"site\": \"diagnosis_cases.py:37 f\"}]}'\n")
            os.chmod(cli, 0o755)
            for case in ("kept", "peak"):
                open(os.path.join(d, f"{case}-snapshot.pickle"), "w").close()
            old = [{"case": "kept", "mode": "snapshot", "expected": "leak", "ended": "OOM"},
                   {"case": "peak", "mode": "snapshot", "expected": "genuine peak", "ended": "OOM"},
                   {"case": "kept", "mode": "profile", "expected": "leak", "ended": "OOM"},
                   {"case": "lost", "mode": "snapshot", "expected": "leak", "ended": "OOM"}]
            cases = {"kept": ({"profile": "leak"}, 37), "peak": ({"profile": "genuine peak"}, 0),
                     "lost": ({"profile": "leak"}, 37)}
            rows = m.rejudged(cli, "diagnosis_cases.py", cases, old, d)
        self.assertEqual([(r["case"], r["ok"]) for r in rows], [("kept", True), ("peak", False)])
        self.assertIsNone(rows[0]["ok_at_oom"])


class Portable(unittest.TestCase):
    def test_no_temporary_folder_of_this_machine(self):
        line = os.path.join(m.tempfile.gettempdir(), "torchinductor_me", "sr", "c.py:183")
        self.assertEqual(m.portable(line, "/elsewhere"), "$TMPDIR/torchinductor_me/sr/c.py:183")


class WarnedRight(unittest.TestCase):
    def test_judged_for_a_leak_that_was_warned_of(self):
        said = "gpumem: leak warning at step 7: tests/gpu/diagnosis_cases.py:37 fn grew"
        self.assertTrue(m.warned_right("leak", said, SITE))
        self.assertFalse(m.warned_right("leak", said.replace(":37", ":38"), SITE))

    def test_a_warning_counted_in_passes_is_judged_as_one_in_steps(self):
        said = "gpumem: leak warning at pass 9: tests/gpu/diagnosis_cases.py:37 kmeans grew"
        self.assertTrue(m.warned_right("leak", said, SITE))

    def test_a_warning_may_name_the_call_that_kept_the_blocks(self):
        said = ("gpumem: leak warning at pass 68: tests/gpu/diagnosis_cases.py:12 "
                "run.<locals>.forward, called from tests/gpu/diagnosis_cases.py:37 run, grew")
        self.assertTrue(m.warned_right("leak", said, SITE))
        self.assertFalse(m.warned_right("leak", said.replace(":37", ":38"), SITE))

    def test_a_warning_may_name_the_library_that_keeps_the_blocks(self):
        said = ("gpumem: leak warning at step 57: tests/gpu/diagnosis_cases.py:37 fn, kept by "
                "Hugging Face's Trainer (its evaluation loop), grew at each of the last 5")
        self.assertTrue(m.warned_right("leak", said, SITE))
        self.assertFalse(m.warned_right("leak", said.replace(":37", ":38"), SITE))

    def test_an_earlier_warning_elsewhere_is_right_only_once_withdrawn(self):
        other = "gpumem: leak warning at step 9: tests/gpu/diagnosis_cases.py:40 fn grew\n"
        leak = "gpumem: leak warning at step 10: tests/gpu/diagnosis_cases.py:37 fn grew\n"
        taken_back = ("gpumem: leak warning withdrawn at step 40: "
                      "tests/gpu/diagnosis_cases.py:40 fn has held no more\n")
        self.assertFalse(m.warned_right("leak", other + leak, SITE))
        self.assertTrue(m.warned_right("leak", other + leak + taken_back, SITE))
        self.assertFalse(m.warned_right("leak", other + taken_back, SITE))

    def test_warnings_where_nothing_leaks_are_counted(self):
        rows = [{"case": "gather", "expected": "no leak", "warning": "gpumem: leak warning"},
                {"case": "quiet", "expected": "genuine peak", "warning": ""},
                {"case": "kept", "expected": "leak", "warning": "gpumem: leak warning"},
                {"case": "gather", "expected": "-", "warning": "gpumem: leak warning"}]
        self.assertEqual(m.false_alarms(rows),
                         "early warnings where nothing leaks: 1 of 2 runs (gather)")

    def test_not_judged_without_a_warning_or_a_leak(self):
        self.assertIsNone(m.warned_right("leak", "", SITE))
        self.assertIsNone(m.warned_right("no leak", "gpumem: leak warning at step 7: x", SITE))


if __name__ == "__main__":
    unittest.main()
