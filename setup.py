"""Builds gpumem's wheel: CMake builds the native parts into the Python package.

The package gets libgpumem.so, libgpumem_cupti.so (where CMake finds CUPTI),
libgpumem_torch.so (where torch imports in this Python: build in the environment that
holds torch, with --no-build-isolation) and the gpumem CLI (gpumem/bin/gpumem); gpumem.pth
goes next to the package in site-packages. Tests and benchmarks are not built.

GPUMEM_BUILD_DIR: the folder for setuptools' and CMake's files (default build-pip), kept
between builds so a rebuild compiles only what changed.
"""
import glob
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

_SOURCE = os.path.dirname(os.path.abspath(__file__))
_BUILD = os.path.abspath(os.environ.get("GPUMEM_BUILD_DIR") or os.path.join(_SOURCE, "build-pip"))


def _torch_prefix():
    """torch's CMake folder, or None where torch does not import here."""
    try:
        import torch.utils  # noqa: PLC0415
    except ImportError:
        return None
    return torch.utils.cmake_prefix_path


def _cmake(*args):
    print("gpumem: cmake " + " ".join(args), flush=True)
    subprocess.run(["cmake", *args], check=True)


def _build_native(staging):
    cmake_dir = os.path.join(_BUILD, "cmake")
    configure = ["-S", _SOURCE, "-B", cmake_dir, "-DCMAKE_BUILD_TYPE=Release",
                 "-DGPUMEM_BUILD_TESTS=OFF", "-DGPUMEM_BENCHMARKS=OFF", "-DGPUMEM_SANITIZERS=OFF"]
    # Extra configure arguments, as scikit-build-core reads them: e.g. where Abseil and
    # the other dependencies are on a machine without Debian's packages.
    configure += shlex.split(os.environ.get("CMAKE_ARGS", ""))
    torch_prefix = _torch_prefix()
    if torch_prefix:
        configure.append("-DCMAKE_PREFIX_PATH=" + torch_prefix)
    else:
        print("gpumem: torch does not import in this Python: building without "
              "libgpumem_torch.so (gpumem.install() and profile() need it; the CLI, "
              "`gpumem report` and the C ABI do not)", flush=True)
    _cmake(*configure)
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    _cmake("--build", cmake_dir, "--target", "gpumem_package", "-j", jobs)
    shutil.rmtree(staging, ignore_errors=True)
    _cmake("--install", cmake_dir, "--prefix", staging)


class BuildPyWithNative(build_py):
    """The Python files, then the native parts next to them."""

    def run(self):
        super().run()
        package = os.path.join(self.build_lib, "gpumem")
        staging = os.path.join(_BUILD, "staging")
        _build_native(staging)
        for lib in glob.glob(os.path.join(staging, "lib*", "libgpumem*.so")):
            self.copy_file(lib, package)
        os.makedirs(os.path.join(package, "bin"), exist_ok=True)
        self.copy_file(os.path.join(staging, "bin", "gpumem"), os.path.join(package, "bin"))
        self.copy_file(os.path.join(_SOURCE, "python", "gpumem.pth"), self.build_lib)


class NativeDistribution(Distribution):
    """A wheel tagged for this platform and Python: it holds native code."""

    def has_ext_modules(self):
        return True


os.makedirs(_BUILD, exist_ok=True)
setup(distclass=NativeDistribution, cmdclass={"build_py": BuildPyWithNative},
      options={"build": {"build_base": _BUILD}, "egg_info": {"egg_base": _BUILD}})
