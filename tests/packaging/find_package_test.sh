#!/usr/bin/env bash
# cmake --install of this build, then a program built against the installed package with
# find_package(gpumem), linking gpumem::gpumem (and gpumem::torch where built), run on the
# sim backend. Usage: find_package_test.sh SOURCE_DIR BUILD_DIR WORK_DIR [PREFIX_PATH]
set -euo pipefail
src=$1 build=$2 work=$3 prefix_path=${4:-}
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
test -f "$work/prefix/include/gpumem/hooks/gpumem.h"
cmake -S "$src/tests/packaging/consumer" -B "$work/consumer" \
  -DCMAKE_PREFIX_PATH="$work/prefix;$prefix_path" \
  -DGPUMEM_TORCH_EXAMPLE="$src/hooks/torch/example.cc" --no-warn-unused-cli >/dev/null
cmake --build "$work/consumer" -j2 >/dev/null
# The installed library, not the build tree's: no GPUMEM_LIB_DIR, no LD_LIBRARY_PATH.
# grep without -q reads all of ldd's output: with pipefail, -q's early exit can fail the
# pipeline on ldd's SIGPIPE (the likely cause of a silent failure seen once under ctest -j2).
ldd "$work/consumer/gpumem_consumer" | grep "$work/prefix/lib.*/libgpumem.so" >/dev/null \
  || { echo "gpumem_consumer does not load the installed libgpumem.so" >&2; exit 1; }
GPUMEM_BACKEND=sim "$work/consumer/gpumem_consumer"
