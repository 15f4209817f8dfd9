"""Installs gpumem in a Python program that does not know about it.

`gpumem run -- python train.py` (or GPUMEM=1 with this folder on PYTHONPATH) makes Python
import this file at start. It changes nothing until the program imports torch; right after
torch's import finishes, before the program can put a tensor on the GPU, it calls
gpumem.install(). A sitecustomize that was already on the path still runs.
"""
import importlib.abc
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


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
            import gpumem  # noqa: PLC0415 (python/ is on the path next to this folder)
            gpumem.install()

        spec.loader.exec_module = exec_then_install
        return spec


def _chain_other_sitecustomize():
    for entry in sys.path:
        folder = os.path.abspath(entry or os.getcwd())
        if folder == _HERE:
            continue
        candidate = os.path.join(folder, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_gpumem_chained_sitecustomize",
                                                          candidate)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return


if os.environ.get("GPUMEM", "") == "1":
    _python_dir = os.path.dirname(os.path.dirname(_HERE))  # .../python
    if _python_dir not in sys.path:
        sys.path.append(_python_dir)
    if "torch" in sys.modules:
        import gpumem
        gpumem.install()
    else:
        sys.meta_path.insert(0, _InstallAfterTorchImport())
elif os.environ.get("GPUMEM", "") not in ("", "0"):
    sys.stderr.write(f"gpumem: GPUMEM='{os.environ['GPUMEM']}': expected 0 or 1\n")
    os._exit(2)
_chain_other_sitecustomize()
