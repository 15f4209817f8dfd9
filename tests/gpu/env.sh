# Sourced by the GPU scripts (run.sh, overhead.sh, overhead_inprocess.sh): the checkout,
# the results folder, the carried prebuilt libraries, the device build and the environment
# that lets Python find gpumem there.
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$repo/gpu-results}
mkdir -p "$OUT"
prebuilt=${GPUMEM_PREBUILT:-$repo/third_party/prebuilt}/usr
build=$repo/build-gpu-device
py=$(command -v python3)
export LD_LIBRARY_PATH=$prebuilt/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export GPUMEM_LIB_DIR=$build/lib
export PYTHONPATH=$repo/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
