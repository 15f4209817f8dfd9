"""The `gpumem` command of an installed package (and `python -m gpumem`): runs the CLI
binary shipped inside the package, pointed at this package and its libraries."""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    exe = os.path.join(_HERE, "bin", "gpumem")
    if not os.path.isfile(exe):
        sys.exit("gpumem: no CLI in this package (" + exe + "); in a source tree, run "
                 "build/bin/gpumem, or install the package: pip install --no-build-isolation .")
    # `gpumem run` puts this package on the program's path; `gpumem doctor` loads its
    # libraries. A folder the user set wins.
    os.environ.setdefault("GPUMEM_PYTHON_DIR", os.path.dirname(_HERE))
    os.environ.setdefault("GPUMEM_LIB_DIR", _HERE)
    os.execv(exe, ["gpumem"] + sys.argv[1:])
