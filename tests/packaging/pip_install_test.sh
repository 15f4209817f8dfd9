#!/usr/bin/env bash
# pip install --no-build-isolation --no-index of this source tree into a fresh venv,
# offline, then the installed gpumem from another folder: the CLI, python -m gpumem, the
# version, the report, and the .pth hook (free without GPUMEM, armed with GPUMEM=1).
# Debian's setuptools and wheel reach a venv only through --system-site-packages (its
# ensurepip has no wheel), so the venv is made with it; nothing of gpumem is there.
# Usage: pip_install_test.sh SOURCE_DIR WORK_DIR (the CMake build is kept in WORK_DIR).
set -euo pipefail
src=$1 work=$2
python=""
for py in python3 /usr/bin/python3; do
  if "$py" -c 'import ensurepip, setuptools, wheel' 2>/dev/null; then python=$py; break; fi
done
if [ -z "$python" ]; then
  echo "no python3 with venv, setuptools and wheel: run scripts/install-deps.sh" >&2
  exit 1
fi
rm -rf "$work/venv" "$work/elsewhere" && mkdir -p "$work/elsewhere"
"$python" -m venv --system-site-packages "$work/venv"
bin=$work/venv/bin
GPUMEM_BUILD_DIR=$work/pip-build "$bin/pip" install --quiet --no-build-isolation --no-index "$src"

cd "$work/elsewhere"
version=$("$bin/python" -c 'import gpumem; print(gpumem.__version__)')
"$bin/gpumem" --version | tee version.txt
grep -q "^gpumem $version (commit " version.txt
"$bin/python" -m gpumem --version | grep -q "^gpumem $version "
"$bin/gpumem" report "$src/tests/data/leaky_mlp.pickle.xz" --html r.html | tee report.txt
grep -q "^Verdict: leak" report.txt
grep -q "HTML report: file://$PWD/r.html" report.txt
# The libraries come from inside the package.
"$bin/python" -c 'import gpumem; print(gpumem._native.find_library())' | grep -q "^$work/venv/"
# gpumem.pth: nothing imported without GPUMEM; armed with GPUMEM=1 and under gpumem run.
[ "$("$bin/python" -c 'import sys; print("gpumem" in sys.modules)')" = False ]
armed='import sys; print("gpumem._autoinstall" in sys.modules)'
[ "$(GPUMEM=1 "$bin/python" -c "$armed")" = True ]
[ "$("$bin/gpumem" run -- "$bin/python" -c "$armed")" = True ]
if GPUMEM=2 "$bin/python" -c pass 2>/dev/null; then echo "GPUMEM=2 accepted" >&2; exit 1; fi
echo "pip install: ok"
