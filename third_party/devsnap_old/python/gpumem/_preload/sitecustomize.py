"""Installs gpumem in a Python program that does not know about it.

`gpumem run -- python train.py` (or GPUMEM=1 with this folder on PYTHONPATH) makes Python
import this file at start; gpumem._autoinstall does the work (an installed package's
gpumem.pth imports the same module). A sitecustomize that was already on the path still
runs.
"""
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


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


if os.environ.get("GPUMEM", "") not in ("", "0"):
    _python_dir = os.path.dirname(os.path.dirname(_HERE))  # .../python
    if _python_dir not in sys.path:
        sys.path.append(_python_dir)
    import gpumem._autoinstall  # noqa: F401,E402 (arms gpumem.install() after torch's import)
_chain_other_sitecustomize()
