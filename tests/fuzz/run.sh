#!/usr/bin/env bash
# Fuzzes the snapshot pickle reader (or, with FUZZ_TARGET=gpumem, the gpumem trace reader)
# with libFuzzer (clang, ASan + UBSan) for N seconds.
#   [FUZZ_TARGET=pickle|gpumem] tests/fuzz/run.sh [SECONDS=60] [extra libFuzzer flags...]
# Builds into build-fuzz/ (plain clang++ of the sources; Abseil from the system) and leaves
# crashes in build-fuzz/artifacts/. Exit status: libFuzzer's (0 when nothing was found).
set -euo pipefail
seconds="${1:-60}"
shift || true
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$root/build-fuzz"
cxx="${CXX_FUZZ:-$(command -v clang++-14 || command -v clang++)}"
mkdir -p "$out/corpus" "$out/artifacts"

if [ "${FUZZ_TARGET:-pickle}" = gpumem ]; then
  # Seeds: a finished trace, a killed one (journal records not compressed yet) and a raw
  # journal region in the target's own framing (tests/profiler/gpumem_reader_fuzzer.cc).
  mkdir -p "$out/gpumem_corpus"
  absl_libs=$(pkg-config --libs absl_status absl_statusor absl_strings absl_str_format absl_flat_hash_map absl_hash)
  (cd "$root" && "$cxx" -std=c++20 -O1 -g -I. -fsanitize=fuzzer,address,undefined \
     -fno-sanitize-recover=undefined tests/profiler/gpumem_reader_fuzzer.cc \
     tools/trace/gpumem_reader.cc tools/trace/frame_table.cc profiler/trace_format.cc \
     $absl_libs -lzstd -lz -o "$out/gpumem_reader_fuzzer")
  cp -n "$root"/tests/fuzz/gpumem_corpus/* "$out/gpumem_corpus/"
  cd "$out"
  exec ./gpumem_reader_fuzzer -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 \
    -artifact_prefix=artifacts/ "$@" gpumem_corpus
fi

sources=(
  tests/fuzz/pickle_reader_fuzz.cc
  tools/trace/action.cc tools/trace/frame_table.cc tools/trace/pickle_reader.cc
  tools/trace/pickle_value.cc tools/trace/pickle_writer.cc tools/trace/snapshot_prelude.cc
  tools/trace/snapshot_reader.cc tools/trace/snapshot_writer.cc
)
absl_libs=$(pkg-config --libs absl_status absl_statusor absl_strings absl_str_format absl_flat_hash_map absl_hash)
(cd "$root" && "$cxx" -std=c++20 -O1 -g -I. -fsanitize=fuzzer,address,undefined \
   -fno-sanitize-recover=undefined "${sources[@]}" $absl_libs -o "$out/pickle_reader_fuzz")

# Seeds: the heads of a real snapshot as Python pickles them (tests/fuzz/corpus); libFuzzer
# adds what it finds to build-fuzz/corpus.
cp -n "$root"/tests/fuzz/corpus/* "$out/corpus/"

cd "$out"
exec ./pickle_reader_fuzz -max_total_time="$seconds" -max_len=16384 -rss_limit_mb=2048 \
  -artifact_prefix=artifacts/ "$@" corpus
