"""Which device the Python package's functions mean, on a fake torch and a fake
libgpumem: none given is the current device once CUDA is initialized (device 0 before,
or without torch), and an int, 'cuda:1', 'cuda' or a torch.device names one, as in
PyTorch's own memory functions.

usage: package_device_test.py PYTHON_DIR. Exits non-zero on failure.
"""
import sys
import types
import unittest

sys.path.insert(0, sys.argv.pop(1) if len(sys.argv) > 1 else "python")
sys.modules["torch"] = None  # the package imports without torch
import gpumem  # noqa: E402
from gpumem import _device, _native  # noqa: E402
del sys.modules["torch"]


class FakeLib:
    """Records the device each call was given."""

    def __init__(self):
        self.devices = []

    def _note(self, device):
        self.devices.append(device)

    def gpumem_stats(self, device, out):
        self._note(device)

    def gpumem_reset_peaks(self, device):
        self._note(device)

    def gpumem_empty_cache(self, device):
        self._note(device)

    def gpumem_set_capacity(self, nbytes, device):
        self._note(device)
        return 0

    def gpumem_trace_capacity(self, device, nbytes, source):
        return 0

    def gpumem_backend_name(self, device):
        self._note(device)
        return b"vmm"

    def _text(self, device, buf, size):
        self._note(device)
        buf.value = b"{}"
        return 3

    gpumem_memory_summary = gpumem_snapshot_json = gpumem_last_oom = _text


class Device:
    """torch.device's two fields."""

    def __init__(self, kind, index=None):
        self.type, self.index = kind, index


def fake_torch(current, initialized=True):
    cuda = types.SimpleNamespace(is_initialized=lambda: initialized,
                                 current_device=lambda: current)
    return types.SimpleNamespace(cuda=cuda, device=Device)


class Index(unittest.TestCase):
    def test_none_is_the_current_device(self):
        self.assertEqual(_device.index(None, fake_torch(3)), 3)

    def test_before_cuda_starts_device_0(self):
        self.assertEqual(_device.index(None, fake_torch(3, initialized=False)), 0)

    def test_without_torch_device_0(self):
        sys.modules.pop("torch", None)
        self.assertEqual(_device.index(None), 0)

    def test_int_string_and_torch_device(self):
        torch = fake_torch(2)
        self.assertEqual(_device.index(1, torch), 1)
        self.assertEqual(_device.index(-1, torch), _device.ALL)
        self.assertEqual(_device.index("cuda:1", torch), 1)
        self.assertEqual(_device.index("1", torch), 1)
        self.assertEqual(_device.index("cuda", torch), 2)
        self.assertEqual(_device.index(Device("cuda", 1), torch), 1)
        self.assertEqual(_device.index(Device("cuda"), torch), 2)

    def test_not_a_cuda_device(self):
        for bad in ("cpu", Device("cpu"), "cuda:x"):
            with self.assertRaises(ValueError):
                _device.index(bad, fake_torch(0))
        with self.assertRaises(TypeError):
            _device.index(1.5, fake_torch(0))


class PackageFunctions(unittest.TestCase):
    def setUp(self):
        self.lib = FakeLib()
        _native._lib = self.lib
        sys.modules["torch"] = fake_torch(1)

    def tearDown(self):
        sys.modules.pop("torch", None)
        _native._lib = None

    def call_all(self, *device):
        gpumem.stats(*device)
        gpumem.memory_summary(*device)
        gpumem.snapshot(*device)
        gpumem.last_oom(*device)
        gpumem.reset_peak_stats(*device)
        gpumem.empty_cache(*device)
        gpumem.set_capacity(1 << 30, *device)
        gpumem.backend(*device)

    def test_every_function_means_the_current_device(self):
        self.call_all()
        self.assertEqual(self.lib.devices, [1] * 8)

    def test_every_function_takes_a_named_device(self):
        self.call_all("cuda:0")
        self.call_all(Device("cuda", 1))
        self.assertEqual(self.lib.devices, [0] * 8 + [1] * 8)

    def test_all_devices(self):
        gpumem.stats(-1)
        gpumem.memory_summary(-1)
        self.assertEqual(self.lib.devices, [-1, -1])


if __name__ == "__main__":
    unittest.main()
