"""A program that dies of a CUDA library's error (cuBLAS, cuDNN, NCCL) is told it is an
out-of-memory, with the allocator's idle bytes and the fixes, through sys.excepthook and
threading.excepthook chained in front of the hooks in place; other exceptions pass
untouched. On a fake torch and a fake libgpumem.

usage: exit_oom_test.py PYTHON_DIR. Exits non-zero on failure.
"""
import io
import os
import re
import sys
import threading
import types
import unittest

sys.path.insert(0, sys.argv.pop(1) if len(sys.argv) > 1 else "python")
sys.modules["torch"] = None  # the package imports without torch
from gpumem import _exit_oom, _native  # noqa: E402
del sys.modules["torch"]

MIB = 1 << 20


class FakeLib:
    def __init__(self):
        self.notes = []

    def gpumem_stats(self, device, out):
        out.reserved_bytes, out.allocated_bytes, out.oom_count = 900 * MIB, 100 * MIB, 1
        return 0

    def gpumem_trace_note(self, device, text):
        self.notes.append(text.decode())
        return 0


LEAK_LINES = ("gpumem:   verdict: leak outside the allocator: NCCL's memory for train.py:9 main "
              "took 470.00 MiB per step from the driver and kept it, over the last 12 step "
              "ends (5.51 GiB now)\ngpumem:   fix: NCCL's memory grows ...\n")


class FakeLibSeeingAnNcclLeak(FakeLib):
    """The CUPTI tracer counted NCCL's memory growing a communicator's worth a step."""

    def gpumem_outside_leak(self, device, buf, size):
        text = LEAK_LINES.encode()
        buf.value = text[:size - 1]
        return len(text) + 1


def fake_torch():
    stats = {"reserved_bytes.all.current": 3000 * MIB, "allocated_bytes.all.current": 1000 * MIB,
             "num_ooms": 2}
    cuda = types.SimpleNamespace(memory_stats=lambda: stats, mem_get_info=lambda: (4 * MIB, 80 << 30),
                                 current_device=lambda: 1)
    return types.SimpleNamespace(cuda=cuda)


class ExitOom(unittest.TestCase):
    def setUp(self):
        self.lib = FakeLib()
        _native._lib = self.lib
        self.saved = (sys.excepthook, threading.excepthook, sys.stderr)
        self.seen = []
        sys.excepthook = lambda *a: self.seen.append(a[1])
        threading.excepthook = lambda args: self.seen.append(args.exc_value)
        sys.stderr = io.StringIO()

    def tearDown(self):
        sys.excepthook, threading.excepthook, sys.stderr = self.saved
        _native._lib = None

    def test_cublas_error_in_profile_mode_names_the_oom(self):
        _exit_oom.install(fake_torch(), profile_mode=True)
        err = RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")
        sys.excepthook(RuntimeError, err, None)
        out = sys.stderr.getvalue()
        self.assertIn("this is an out-of-memory: CUBLAS_STATUS_ALLOC_FAILED", out)
        self.assertIn("PyTorch's caching allocator held 2000.0 MiB idle", out)
        self.assertIn("since the 2 out-of-memory errors the program caught", out)
        self.assertIn("the driver had 4.0 MiB free", out)
        self.assertIn("torch.cuda.empty_cache()", out)
        self.assertIn("set_per_process_memory_fraction", out)
        self.assertEqual(self.seen, [err])  # the previous hook still runs
        self.assertEqual(len(self.lib.notes), 1)  # and the trace has it

    def test_nccl_error_in_a_thread_under_gpumem(self):
        _exit_oom.install(fake_torch(), profile_mode=False)
        cause = RuntimeError("NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error")
        err = RuntimeError("DistBackendError")
        err.__cause__ = cause
        threading.excepthook(types.SimpleNamespace(exc_type=RuntimeError, exc_value=err,
                                                   exc_traceback=None, thread=None))
        out = sys.stderr.getvalue()
        self.assertIn("NCCL error", out)
        self.assertIn("gpumem's allocator held 800.0 MiB idle", out)
        self.assertEqual(self.seen, [err])

    def test_an_nccl_error_after_nccls_memory_grew_is_that_leak(self):
        self.lib = FakeLibSeeingAnNcclLeak()
        _native._lib = self.lib
        _exit_oom.install(fake_torch(), profile_mode=True)
        err = RuntimeError("NCCL error in: NCCLUtils.cpp:253, unhandled cuda error (run with "
                           "NCCL_DEBUG=INFO for details), NCCL version 2.28.9")
        sys.excepthook(RuntimeError, err, None)
        out = sys.stderr.getvalue()
        self.assertIn("this is an out-of-memory: NCCL error", out)
        self.assertTrue(out.endswith(LEAK_LINES), out)  # the leak's fix, not the usual ones
        self.assertNotIn("torch.cuda.empty_cache()", out)

    def test_another_ranks_failure_is_not_called_an_out_of_memory(self):
        _exit_oom.install(fake_torch(), profile_mode=False)
        err = RuntimeError("NCCL error in: NCCLUtils.cpp:253, remote process exited or there "
                           "was a network error, NCCL version 2.28.9\nncclRemoteError: A call "
                           "failed possibly due to a network error or a remote process exiting")
        sys.excepthook(RuntimeError, err, None)
        out = sys.stderr.getvalue()
        self.assertNotIn("out-of-memory", out)
        self.assertIn("another rank exited", out)
        self.assertEqual(self.seen, [err])

    def test_other_exceptions_pass_silently(self):
        _exit_oom.install(fake_torch(), profile_mode=True)
        err = ValueError("bad shape")
        sys.excepthook(ValueError, err, None)
        self.assertEqual(sys.stderr.getvalue(), "")
        self.assertEqual(self.seen, [err])
        self.assertEqual(self.lib.notes, [])

    def test_dying_of_an_out_of_memory_error_is_noted_in_the_trace(self):
        _exit_oom.install(fake_torch(), profile_mode=False)

        class OutOfMemoryError(RuntimeError):  # torch.OutOfMemoryError's name
            pass
        err = OutOfMemoryError("CUDA out of memory. Tried to allocate 2.33 GiB.\nmore")
        sys.excepthook(OutOfMemoryError, err, None)
        self.assertEqual(self.lib.notes, [_exit_oom.DIED_OF_OOM_NOTE +
                                          ": CUDA out of memory. Tried to allocate 2.33 GiB."])
        self.assertEqual(sys.stderr.getvalue(), "")  # said by the allocator already
        self.assertEqual(self.seen, [err])

    def test_an_out_of_memory_error_wrapped_by_the_program_is_noted_too(self):
        _exit_oom.install(fake_torch(), profile_mode=True)
        err = ValueError("batch 12 failed")
        err.__cause__ = RuntimeError("CUDA out of memory. Tried to allocate 8 bytes")
        sys.excepthook(ValueError, err, None)
        self.assertEqual(len(self.lib.notes), 1)
        self.assertTrue(self.lib.notes[0].startswith(_exit_oom.DIED_OF_OOM_NOTE))

    def test_a_library_error_after_a_caught_out_of_memory_is_not_noted_as_one(self):
        _exit_oom.install(fake_torch(), profile_mode=True)
        err = RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED")
        err.__context__ = RuntimeError("CUDA out of memory. Tried to allocate 8 bytes")
        sys.excepthook(RuntimeError, err, None)
        self.assertEqual(len(self.lib.notes), 1)  # the library's, not a death by OOM
        self.assertFalse(self.lib.notes[0].startswith(_exit_oom.DIED_OF_OOM_NOTE))

    def test_a_thread_dying_of_one_is_not_the_program_dying(self):
        _exit_oom.install(fake_torch(), profile_mode=True)
        err = RuntimeError("CUDA out of memory. Tried to allocate 8 bytes")
        threading.excepthook(types.SimpleNamespace(exc_type=RuntimeError, exc_value=err,
                                                   exc_traceback=None, thread=None))
        self.assertEqual(self.lib.notes, [])

    def test_the_note_is_the_one_the_report_reads(self):
        header = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                              "profiler", "trace_format.h")
        with open(header) as f:
            self.assertRegex(f.read(), r'kDiedOfOomNote =\s*"%s"' % re.escape(
                _exit_oom.DIED_OF_OOM_NOTE))


if __name__ == "__main__":
    unittest.main()
