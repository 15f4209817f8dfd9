#!/usr/bin/env bash
# Fuzzes gpumem's readers with libFuzzer (clang, ASan + UBSan), each target for SECONDS:
#   tests/fuzz/run.sh [SECONDS=60] [extra libFuzzer flags...]     every target in turn
#   FUZZ_TARGET=tsv tests/fuzz/run.sh 600                         one of them
# Targets: pickle (snapshot pickles), gpumem (gpumem traces), tsv (.tsv traces), xz, gzip,
# zstd (the decompressors). Seeds come from tests/fuzz/<target>_corpus (pickle: corpus/),
# made from the real traces in tests/data; libFuzzer adds what it finds to
# build-fuzz/<target>_corpus and leaves crashes in build-fuzz/artifacts/. Each target's
# summary (executions, coverage, crashes) goes to build-fuzz/<target>.log.
# Exit status: 0 when no target found anything, else that of the first that did.
set -euo pipefail
seconds="${1:-60}"
shift || true
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$root/build-fuzz"
cxx="${CXX_FUZZ:-$(command -v clang++-14 || command -v clang++)}"
absl_libs=$(pkg-config --libs absl_status absl_statusor absl_strings absl_str_format absl_flat_hash_map absl_hash)
mkdir -p "$out/artifacts"

decompress=(tools/trace/decompress.cc tools/trace/input_limit.cc tests/fuzz/decompress_fuzz.cc)
sources() {  # the target's sources, beside its own file
  case "$1" in
    pickle) echo tests/fuzz/pickle_reader_fuzz.cc tools/trace/action.cc tools/trace/frame_table.cc \
        tools/trace/pickle_nesting.cc tools/trace/pickle_reader.cc tools/trace/pickle_value.cc \
        tools/trace/pickle_writer.cc tools/trace/snapshot_prelude.cc tools/trace/snapshot_reader.cc \
        tools/trace/snapshot_writer.cc ;;
    gpumem) echo tests/profiler/gpumem_reader_fuzzer.cc tools/trace/gpumem_reader.cc \
        tools/trace/autograd_links.cc tools/trace/frame_table.cc profiler/trace_format.cc ;;
    tsv) echo tests/fuzz/tsv_reader_fuzz.cc tools/trace/tsv_reader.cc tools/trace/action.cc \
        tools/trace/frame_table.cc "${decompress[@]:0:2}" ;;
    xz|gzip|zstd) echo "tests/fuzz/$1_fuzz.cc" "${decompress[@]}" ;;
    *) echo "unknown FUZZ_TARGET $1 (pickle, gpumem, tsv, xz, gzip, zstd)" >&2; return 2 ;;
  esac
}
seeds() { [ "$1" = pickle ] && echo "$root/tests/fuzz/corpus" || echo "$root/tests/fuzz/$1_corpus"; }
max_len() { case "$1" in pickle) echo 16384 ;; *) echo 65536 ;; esac; }

fuzz() {  # target, extra libFuzzer flags...
  local t=$1 src rc=0
  shift
  src=$(sources "$t")
  (cd "$root" && "$cxx" -std=c++20 -O1 -g -I. -fsanitize=fuzzer,address,undefined \
     -fno-sanitize-recover=undefined $src $absl_libs -llzma -lz -lzstd -o "$out/${t}_fuzz")
  mkdir -p "$out/${t}_corpus"
  cp -n "$(seeds "$t")"/* "$out/${t}_corpus/"
  echo "== $t: ${seconds}s" >&2
  (cd "$out" && "./${t}_fuzz" -max_total_time="$seconds" -max_len="$(max_len "$t")" \
     -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=artifacts/ "$@" "${t}_corpus" \
     > "$t.log" 2>&1) || rc=$?
  grep -E '^(#[0-9]+.*DONE|stat::number_of_executed_units|==[0-9]+==ERROR|SUMMARY)' "$out/$t.log" >&2 || true
  return "$rc"
}

status=0
for t in ${FUZZ_TARGET:-pickle gpumem tsv xz gzip zstd}; do
  fuzz "$t" "$@" || { rc=$?; [ "$status" = 0 ] && status=$rc; }
done
exit "$status"
