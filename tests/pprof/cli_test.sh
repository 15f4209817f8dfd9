#!/usr/bin/env bash
# gpumem export --format pprof from the command line: a bad --at or a moment the trace
# lacks gives one line on stderr and exit status 2; a profile of a real trace decodes
# (protoc) with the report's peak as its live bytes. Where pprof export is not built, the
# command says so.
# (Where it is not built, that comes first, whatever --at says.)
# usage: cli_test.sh GPUMEM_BINARY TEST_DATA_DIR yes|no PROTO_DIR [PROTOC]
set -uo pipefail
gpumem=$1
data=$2
built=$3
proto_dir=$4
protoc=${5:-}
source "$(dirname "$0")/../cli_check.sh"
expect_bad_input() {  # name, expected text on stderr, args...
  local name=$1 text=$2; shift 2
  run_bad_input "$name" "$@"
  check "$name: says '$text'" "grep -q -- \"$text\" \"$tmp/err\""
  check "$name: no file written" "[ ! -e \"$tmp/p.pb.gz\" ]"
}

trace=$data/leaky_mlp.pickle.xz
expect_bad_input "--at on another format" "--at applies to --format pprof only" \
  export "$trace" --format perfetto --at peak -o "$tmp/p.pb.gz"

if [ "$built" != yes ]; then
  expect_bad_input "pprof not built" "pprof export was not built" \
    export "$trace" --format pprof -o "$tmp/p.pb.gz"
  exit $fail
fi

expect_bad_input "bad --at" "--at must be peak, oom or step:N" \
  export "$trace" --format pprof --at middle -o "$tmp/p.pb.gz"
expect_bad_input "--at oom without an OOM" "no OOM in the trace" \
  export "$trace" --format pprof --at oom -o "$tmp/p.pb.gz"
expect_bad_input "--at step past the last" "the trace has 60 step ends" \
  export "$trace" --format pprof --at step:61 -o "$tmp/p.pb.gz"

"$gpumem" export "$trace" --format pprof -o "$tmp/p.pb.gz" 2>"$tmp/err"
check "peak: exit 0" "[ $? -eq 0 ]"
check "peak: says the moment" "grep -q 'profiled the peak of allocated memory' \"$tmp/err\""
check "peak: gzip" "gzip -t \"$tmp/p.pb.gz\""
if [ -z "$protoc" ]; then
  echo "skip: protoc not found, the profile is not decoded here (pprof_export_test decodes it)"
  exit $fail
fi
gzip -dc "$tmp/p.pb.gz" | "$protoc" --decode=perftools.profiles.Profile \
  --proto_path="$proto_dir" "$proto_dir/profile.proto" >"$tmp/p.txt"
check "peak: decodes" "[ $? -eq 0 ] && grep -q '^sample {' \"$tmp/p.txt\""
check "peak: sample types" "grep -q 'string_table: \"inuse_space\"' \"$tmp/p.txt\" && grep -q 'string_table: \"alloc_objects\"' \"$tmp/p.txt\""
check "peak: the leak site's file" "grep -q 'string_table: \".*capture.py\"' \"$tmp/p.txt\""
# Every sample has 4 values; the 4th is inuse_space.
live=$(awk '/^  value: / { n++; if (n % 4 == 0) s += $2 } END { printf "%d", s }' "$tmp/p.txt")
peak=$("$gpumem" report "$trace" --json | sed -n 's/.*"peak_allocated": \([0-9]*\).*/\1/p' | head -1)
check "peak: live bytes ($live) are the report's peak ($peak)" "[ -n \"$peak\" ] && [ \"$live\" = \"$peak\" ]"

"$gpumem" export "$trace" --format pprof --at step:3 -o "$tmp/s.pb.gz" 2>"$tmp/err"
check "step:3: exit 0" "[ $? -eq 0 ]"
check "step:3: says the moment" "grep -q 'profiled the end of step 3' \"$tmp/err\""
exit $fail
