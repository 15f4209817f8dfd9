"""The Python package's step marks and cap records, on a fake torch and a fake libgpumem:
one optimizer, several, GradScaler's skipped steps, a script that also calls gpumem.step(),
set_per_process_memory_fraction; and the package imports with no torch at all.

usage: package_steps_test.py PYTHON_DIR. Exits non-zero on failure.
"""
import importlib
import os
import shutil
import sys
import tempfile
import types
import unittest

sys.path.insert(0, sys.argv.pop(1) if len(sys.argv) > 1 else "python")
sys.modules["torch"] = None  # `import torch` fails: the package must not need it to import
import gpumem  # noqa: E402
from gpumem import _capacity, _steps  # noqa: E402
del sys.modules["torch"]


class FakeLib:
    def __init__(self):
        self.steps = []      # the step source in force at each gpumem_step
        self.source = 0
        self.caps = []

    def gpumem_step(self):
        self.steps.append(self.source)
        return len(self.steps)

    def gpumem_trace_step_source(self, source):
        self.source = source
        return 0

    def gpumem_trace_capacity(self, device, nbytes, source):
        self.caps.append((device, nbytes, source))
        return 0


class Opt:
    pass


def fake_torch():
    hooks = []
    optimizer = types.SimpleNamespace(register_optimizer_step_post_hook=hooks.append)
    props = types.SimpleNamespace(total_memory=80 << 30)
    calls = []
    cuda = types.SimpleNamespace(
        set_per_process_memory_fraction=lambda f, d=None: calls.append((f, d)),
        get_device_properties=lambda d: props, current_device=lambda: 0, device_count=lambda: 2,
        is_initialized=lambda: True)
    cuda.memory = types.SimpleNamespace(
        set_per_process_memory_fraction=cuda.set_per_process_memory_fraction)
    torch = types.SimpleNamespace(optim=types.SimpleNamespace(optimizer=optimizer), cuda=cuda)
    return torch, hooks, calls


class StepMarks(unittest.TestCase):
    def setUp(self):
        self.lib = FakeLib()
        self.m = _steps.StepMarker(self.lib)

    def step(self, opt):
        self.m.on_optimizer_step(opt, (), {})

    def test_one_optimizer_marks_each_step(self):
        opt = Opt()
        for _ in range(5):
            self.step(opt)
        self.assertEqual(self.lib.steps, [_steps.SOURCE_OPTIMIZER_HOOK] * 5)

    def test_several_optimizers_make_one_step_per_iteration(self):
        d, g = Opt(), Opt()
        for _ in range(4):
            self.step(d)
            self.step(g)
        self.assertEqual(len(self.lib.steps), 4)

    def test_skipped_step_is_not_a_step(self):
        opt = Opt()
        for i in range(4):
            if i != 2:  # GradScaler skipped optimizer.step(): its hook did not fire
                self.step(opt)
        self.assertEqual(len(self.lib.steps), 3)

    def test_iteration_where_one_of_two_optimizers_skipped_still_counts(self):
        d, g = Opt(), Opt()
        for i in range(4):
            if i != 2:
                self.step(d)
            self.step(g)
        self.assertEqual(len(self.lib.steps), 4)

    def test_a_new_optimizer_takes_the_lead(self):
        finder, real = Opt(), Opt()
        self.step(finder)
        for _ in range(5):
            self.step(real)
        self.assertEqual(len(self.lib.steps), 1 + 4)

    def test_explicit_steps_are_not_counted_twice(self):
        opt = Opt()
        for _ in range(3):
            self.step(opt)
            self.m.on_explicit_step()
        self.assertEqual(len(self.lib.steps), 3)
        self.assertEqual(self.lib.steps[1:], [_steps.SOURCE_EXPLICIT] * 2)

    def test_explicit_only(self):
        for _ in range(3):
            self.m.on_explicit_step()
        self.assertEqual(self.lib.steps, [_steps.SOURCE_EXPLICIT] * 3)


class Hooks(unittest.TestCase):
    def test_registers_once(self):
        torch, hooks, _ = fake_torch()
        self.assertTrue(_steps.watch_optimizers(torch))
        self.assertFalse(_steps.watch_optimizers(torch))
        self.assertEqual(len(hooks), 1)

    def test_imports_optim_that_torch_has_not_imported_yet(self):
        # torch imports torch.optim lazily: right after `import torch`, when gpumem
        # installs, the attribute is not there yet.
        root = tempfile.mkdtemp()
        package = os.path.join(root, "lazytorch")
        os.makedirs(os.path.join(package, "optim"))
        open(os.path.join(package, "__init__.py"), "w").close()
        open(os.path.join(package, "optim", "__init__.py"), "w").close()
        with open(os.path.join(package, "optim", "optimizer.py"), "w") as f:
            f.write("hooks = []\nregister_optimizer_step_post_hook = hooks.append\n")
        sys.path.insert(0, root)
        try:
            torch = importlib.import_module("lazytorch")
            self.assertFalse(hasattr(torch, "optim"))
            self.assertTrue(_steps.watch_optimizers(torch))
            self.assertEqual(len(sys.modules["lazytorch.optim.optimizer"].hooks), 1)
        finally:
            sys.path.remove(root)
            shutil.rmtree(root)

    def test_old_torch_without_hooks(self):
        self.assertFalse(_steps.watch_optimizers(types.SimpleNamespace()))


class Capacity(unittest.TestCase):
    def test_memory_fraction_is_recorded(self):
        torch, _, calls = fake_torch()
        lib = FakeLib()
        self.assertTrue(_capacity.watch_memory_fraction(torch, lib))
        self.assertFalse(_capacity.watch_memory_fraction(torch, lib))
        torch.cuda.set_per_process_memory_fraction(0.5)
        torch.cuda.memory.set_per_process_memory_fraction(0.25, 1)
        self.assertEqual(calls, [(0.5, None), (0.25, 1)])
        self.assertEqual(lib.caps, [(0, 40 << 30, _capacity.SOURCE_MEMORY_FRACTION),
                                    (1, 20 << 30, _capacity.SOURCE_MEMORY_FRACTION)])

    def test_device_totals(self):
        torch, _, _ = fake_torch()
        lib = FakeLib()
        _capacity.record_device_totals(torch, lib)
        self.assertEqual(lib.caps, [(0, 80 << 30, 1), (1, 80 << 30, 1)])


if __name__ == "__main__":
    unittest.main()
