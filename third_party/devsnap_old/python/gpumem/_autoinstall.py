"""Installs gpumem in a Python program that does not know about it, when GPUMEM=1.

Imported at interpreter start by an installed package's gpumem.pth (only when GPUMEM is
set) or by _preload/sitecustomize.py (`gpumem run`, or a build tree on PYTHONPATH); a
second import is a no-op. It changes nothing until the program imports torch; right after
torch's import finishes, before the program can put a tensor on the GPU, it calls
gpumem.install().
"""
import importlib.abc
import importlib.util
import os
import sys


class _InstallAfterTorchImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)  # once, and let the real finders find torch
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_install(module):
            exec_module(module)
            import gpumem  # noqa: PLC0415
            gpumem.install()

        spec.loader.exec_module = exec_then_install
        return spec


def _arm():
    value = os.environ.get("GPUMEM", "")
    if value == "1":
        if "torch" in sys.modules:
            import gpumem  # noqa: PLC0415
            gpumem.install()
        else:
            sys.meta_path.insert(0, _InstallAfterTorchImport())
    elif value not in ("", "0"):
        sys.stderr.write(f"gpumem: GPUMEM='{value}': expected 0 or 1\n")
        os._exit(2)


_arm()
