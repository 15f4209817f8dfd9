#!/usr/bin/env bash
# gpumem report / export from the command line: bad input of every kind gives one line on
# stderr and exit status 2; good input gives the verdict, valid JSON and export files.
# usage: cli_test.sh GPUMEM_BINARY TEST_DATA_DIR
set -uo pipefail
gpumem=$1
data=$2
source "$(dirname "$0")/../cli_check.sh"
expect_bad_input() { run_bad_input "$@"; }

: >"$tmp/empty.trace.tsv"
head -c 3000 "$data/gpt2.trace.tsv.gz" >"$tmp/truncated.trace.tsv.gz"
# Cut and damaged deep inside (the reader streams: the error comes after lines were parsed).
gz_size=$(wc -c <"$data/gpt2.trace.tsv.gz")
head -c $((gz_size - 100)) "$data/gpt2.trace.tsv.gz" >"$tmp/late-cut.trace.tsv.gz"
zcat "$data/gpt2.trace.tsv.gz" | sed '5000s/^\([0-9]*\)\t[a-z_]*\t/\1\tmalloc\t/' | gzip >"$tmp/late-bad-line.trace.tsv.gz"
xz -dc "$data/leaky_mlp.pickle.xz" | head -c 20000 >"$tmp/truncated.pickle"
head -c 4096 /dev/urandom >"$tmp/random.bin"
printf '0\talloc\t12\tnot-a-number\t0\t0\t0\n' >"$tmp/corrupt.trace.tsv"
printf '\x89PNG\r\n\x1a\n0000' >"$tmp/image.png"

expect_bad_input "missing file" report "$tmp/nope.pickle"
expect_bad_input "empty file" report "$tmp/empty.trace.tsv"
expect_bad_input "truncated gzip" report "$tmp/truncated.trace.tsv.gz"
expect_bad_input "truncated pickle" report "$tmp/truncated.pickle"
expect_bad_input "gzip cut near its end" report "$tmp/late-cut.trace.tsv.gz"
check "gzip cut near its end: names the file and byte" \
  "grep -q 'late-cut.trace.tsv.gz: gzip stream is truncated at compressed byte [0-9]' \"$tmp/err\""
expect_bad_input "bad line deep in a gzip" report "$tmp/late-bad-line.trace.tsv.gz"
check "bad line deep in a gzip: names the line" "grep -q 'line 5000: unknown action' \"$tmp/err\""
expect_bad_input "random bytes" report "$tmp/random.bin"
expect_bad_input "corrupt tsv" report "$tmp/corrupt.trace.tsv"
expect_bad_input "wrong format" report "$tmp/image.png"
expect_bad_input "bad --capacity" report "$data/leaky_mlp.trace.tsv.gz" --capacity 12XB
expect_bad_input "bad --step-site" report "$data/leaky_mlp.trace.tsv.gz" --step-site capture.py
expect_bad_input "export of a missing file" export "$tmp/nope" --format perfetto -o "$tmp/x.json"

"$gpumem" report "$data/leaky_mlp.trace.tsv.gz" >"$tmp/summary" 2>&1
check "summary exits 0" "[ $? -eq 0 ]"
check "summary names the leak" "grep -q 'Verdict: leak' \"$tmp/summary\""
check "summary fits one screen" "[ \$(wc -l <\"$tmp/summary\") -le 40 ]"
"$gpumem" report "$data/leaky_mlp.trace.tsv.gz" --json --capacity 1GiB >"$tmp/report.json"
check "--json: top suspect" "grep -q '\"site\": \"capture.py:78 leaky_mlp\"' \"$tmp/report.json\""
check "--json: projected step" "grep -q '\"projected_oom_step\": [0-9]' \"$tmp/report.json\""
"$gpumem" report "$data/gpt2.trace.tsv.gz" --json >"$tmp/gpt2.json"
check "--json: gpt2 has no suspects" "grep -q '\"leak_suspects\": \[\]' \"$tmp/gpt2.json\""
"$gpumem" report "$data/leaky_mlp.trace.tsv.gz" --html "$tmp/r.html" >/dev/null
check "--html written, self-contained" "[ -s \"$tmp/r.html\" ] && ! grep -q '<script src=\|<link ' \"$tmp/r.html\""
"$gpumem" export "$data/leaky_mlp.trace.tsv.gz" --format perfetto -o "$tmp/p.json" 2>/dev/null
check "export perfetto" "grep -q '\"traceEvents\"' \"$tmp/p.json\""
"$gpumem" export "$data/leaky_mlp.trace.tsv.gz" --format pytorch-snapshot -o "$tmp/s.pickle" 2>/dev/null
"$gpumem" report "$tmp/s.pickle" --json >"$tmp/s.json"
check "export pytorch-snapshot reads back with the same top suspect" \
  "grep -q '\"site\": \"capture.py:78 leaky_mlp\"' \"$tmp/s.json\""
# GPU-recorded traces hold absolute paths: sites are shown relative to their folder, the
# stack keeps the full path.
"$gpumem" report "$data/leaky_mlp_pair.gpumem" --json >"$tmp/pair.json"
check "gpumem trace: site relative to its folder" "grep -q '\"site\": \"capture.py:107 leaky_mlp\"' \"$tmp/pair.json\""
check "gpumem trace: the folder is given" "grep -q '\"sites_relative_to\": \"/.*/\"' \"$tmp/pair.json\""
check "gpumem trace: stack keeps full paths" "grep -q '\"/.*/capture.py:107 leaky_mlp\"' \"$tmp/pair.json\""
# A killed run's gpumem trace: the report reads what was recovered and says so.
size=$(wc -c <"$data/leaky_mlp_pair.gpumem")
head -c $((size * 2 / 3)) "$data/leaky_mlp_pair.gpumem" >"$tmp/killed.gpumem"
"$gpumem" report "$tmp/killed.gpumem" >"$tmp/killed.out" 2>"$tmp/killed.err"
check "truncated gpumem trace: report exits 0" "[ $? -eq 0 ]"
check "truncated gpumem trace: says what was recovered" "grep -q 'warning: .*recovered [0-9]* events' \"$tmp/killed.out\""
check "truncated gpumem trace: still a verdict" "grep -q 'Verdict' \"$tmp/killed.out\""
exit $fail
