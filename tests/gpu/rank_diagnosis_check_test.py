#!/usr/bin/env python3
"""The rank check's per-device line: the report's split of the driver's figure, NVML's
where it was read at the peak, and whether what neither names is within 1%."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rank_diagnosis_check as check  # noqa: E402

GIB = 1 << 30


def peak(processes):
    return {"device": 2, "peak": {
        "allocator_reserved": 10 * GIB, "driver_used": 12 * GIB, "remainder": GIB,
        "outside": {"nccl": GIB, "cublas": 0, "total": GIB}, "processes": processes}}


class DriverLineTest(unittest.TestCase):
    def test_without_nvml_the_rest_is_one_figure(self):
        line = check.driver_line(peak(None))
        self.assertIn("device 2 at its peak: allocator reserved 10.00 GiB, outside it nccl "
                      "1.00 GiB; the driver 12.00 GiB in use, of which 91.7% seen", line)
        self.assertIn("the rest (1.00 GiB) the CUDA context and unseen (NVML not read", line)

    def test_nvml_splits_the_rest_and_checks_the_sum(self):
        p = {"context_and_unseen": GIB - 2**20 * 64, "others_total": 2**20 * 60,
             "unnamed": 2**20 * 4}
        line = check.driver_line(peak(p))
        self.assertIn("this process's CUDA context, kernels and unseen calls 0.94 GiB, other "
                      "processes 0.06 GiB; named by neither 4 MiB (0.03%): adds up within "
                      "1%: yes", line)
        p["unnamed"] = -GIB // 4
        self.assertIn("(2.08%): adds up within 1%: NO", check.driver_line(peak(p)))

    def test_unknown_driver(self):
        self.assertEqual(check.driver_line({"device": 1}),
                         "  - device 1: the driver's figure unknown")


if __name__ == "__main__":
    unittest.main()
