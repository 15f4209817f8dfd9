"""The Python package without libgpumem_torch.so, on a fake torch and the real libgpumem:
install() wires PyTorch's pluggable allocator to functions the library exports, the
allocating one the one that throws (PyTorch uses a NULL pointer unchecked), and says what
the user loses.

usage: package_fallback_test.py PYTHON_DIR LIBGPUMEM. Exits non-zero on failure.
"""
import ctypes
import sys
import types
import unittest
import warnings

LIB = sys.argv.pop(2)
sys.path.insert(0, sys.argv.pop(1))
sys.modules["torch"] = None  # the package imports without torch
import gpumem  # noqa: E402
from gpumem import _native  # noqa: E402
del sys.modules["torch"]


class Pluggable:
    """torch.cuda.memory.CUDAPluggableAllocator: records what it was given."""
    made = []

    def __init__(self, path, alloc_fn_name, free_fn_name):
        Pluggable.made.append((path, alloc_fn_name, free_fn_name))


class FallbackInstall(unittest.TestCase):
    def test_wires_the_throwing_alloc_the_library_exports(self):
        installed = []
        memory = types.SimpleNamespace(CUDAPluggableAllocator=Pluggable,
                                       change_current_allocator=installed.append)
        sys.modules["torch"] = types.SimpleNamespace(cuda=types.SimpleNamespace(memory=memory))
        _native.torch_lib = lambda: None
        _native.find_library = lambda *args: LIB
        gpumem._config_error = lambda: ""
        gpumem._profile_mode = lambda: False
        gpumem._watch_cuda_in_forked_children = lambda torch: None
        gpumem._watch_training = lambda torch, profile_mode: None
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            gpumem.install()
        self.assertEqual(len(installed), 1)
        path, alloc, free = Pluggable.made[0]
        lib = ctypes.CDLL(path)
        self.assertTrue(hasattr(lib, alloc), alloc)
        self.assertTrue(hasattr(lib, free), free)
        self.assertEqual(alloc, "gpumem_alloc_or_throw")
        self.assertIn("RuntimeError, not torch.OutOfMemoryError", str(said[0].message))


if __name__ == "__main__":
    unittest.main()
