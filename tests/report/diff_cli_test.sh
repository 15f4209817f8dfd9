#!/usr/bin/env bash
# gpumem diff from the command line: synthetic traces with a known answer (a site growing,
# one new, one gone), two runs, JSON and HTML, a real trace whose figures add up, and bad
# input (one line on stderr, exit status 2).
# usage: diff_cli_test.sh GPUMEM_BINARY TEST_DATA_DIR
set -uo pipefail
gpumem=$1
data=$2
source "$(dirname "$0")/../cli_check.sh"
expect_bad_input() {  # name, args...
  local name=$1; shift
  run_bad_input "$name" diff "$@"
  check "$name: nothing on stdout" "[ ! -s \"$tmp/out\" ]"
}

# Usage errors CLI11 finds itself: exit 2, its message and a pointer to --help.
expect_usage_error() {  # name, args...
  local name=$1; shift
  "$gpumem" diff "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  check "$name: exit 2 (got $rc)" "[ $rc -eq 2 ]"
  check "$name: says why" "[ -s \"$tmp/err\" ] && grep -q -- '--help' \"$tmp/err\""
  check "$name: nothing on stdout" "[ ! -s \"$tmp/out\" ]"
}

# Three marked steps. End of step 1: grow 1 MiB, gone 2 MiB, steady 1 MiB (4 MiB). End of
# step 3: grow 3 MiB, fresh 4 MiB (new), steady 1 MiB, gone freed (8 MiB).
stacks=$'S\t1\ttrain.py:10:grow | train.py:200:<module>
S\t2\ttrain.py:20:gone | train.py:200:<module>
S\t3\ttrain.py:30:fresh | train.py:200:<module>
S\t4\ttrain.py:40:steady | train.py:200:<module>'
M=1048576
{
  echo "$stacks"
  printf '0\tsegment_alloc\t0\t%d\t0\t1\t0\n' $((64 * M))
  printf '1\talloc\t0\t%d\t0\t2\t4\n' $M
  printf '2\talloc\t%d\t%d\t0\t3\t2\n' $M $((2 * M))
  printf '3\talloc\t%d\t%d\t0\t4\t1\n' $((4 * M)) $M
  printf '4\tstep\t0\t0\t0\t5\t0\n'
  printf '5\talloc\t%d\t%d\t0\t6\t1\n' $((5 * M)) $M
  printf '6\tstep\t0\t0\t0\t7\t0\n'
  printf '7\talloc\t%d\t%d\t0\t8\t1\n' $((6 * M)) $M
  printf '8\tfree_requested\t%d\t%d\t0\t9\t2\n' $M $((2 * M))
  printf '9\tfree_completed\t%d\t%d\t0\t10\t2\n' $M $((2 * M))
  printf '10\talloc\t%d\t%d\t0\t11\t3\n' $((8 * M)) $((4 * M))
  printf '11\tstep\t0\t0\t0\t12\t0\n'
} >"$tmp/steps.trace.tsv"
# A second run: `grow` holds 5 MiB at its only step end, `fresh` is not there.
{
  echo "$stacks"
  printf '0\tsegment_alloc\t0\t%d\t0\t1\t0\n' $((64 * M))
  printf '1\talloc\t0\t%d\t0\t2\t4\n' $M
  printf '2\talloc\t%d\t%d\t0\t3\t1\n' $((4 * M)) $((5 * M))
  printf '3\tstep\t0\t0\t0\t4\t0\n'
} >"$tmp/other.trace.tsv"
{
  echo "$stacks"
  printf '0\talloc\t0\t%d\t0\t2\t4\n' $M
} >"$tmp/nosteps.trace.tsv"

# One trace, two step ends.
"$gpumem" diff "$tmp/steps.trace.tsv" --from 1 --to 3 >"$tmp/steps.out" 2>&1
check "steps: exit 0" "[ $? -eq 0 ]"
check "steps: names both points and how steps were found" \
  "grep -q 'from: .*steps.trace.tsv, end of step 1 of 3  (steps: step-events' \"$tmp/steps.out\" && grep -q 'to: .*end of step 3 of 3' \"$tmp/steps.out\""
check "steps: the new site first" "grep -A1 'largest growth first' \"$tmp/steps.out\" | grep -q '+4.00 MiB  train.py:30 fresh  \[new\]'"
check "steps: the growing site" "grep -q '1.00 MiB *3.00 MiB *+2.00 MiB  train.py:10 grow$' \"$tmp/steps.out\""
check "steps: the gone site" "grep -q '2.00 MiB *0 B *-2.00 MiB  train.py:20 gone  \[gone\]' \"$tmp/steps.out\""
check "steps: totals line" "grep -q '4.00 MiB *8.00 MiB *+4.00 MiB  total (4 sites: 1 grown, 1 new, 0 shrunk, 1 gone, 1 unchanged)' \"$tmp/steps.out\""
"$gpumem" diff "$tmp/steps.trace.tsv" >"$tmp/default.out" 2>&1
check "steps: defaults are the first and last step ends" "diff -q \"$tmp/steps.out\" \"$tmp/default.out\" >/dev/null"
"$gpumem" diff "$tmp/steps.trace.tsv" --top 1 >"$tmp/top.out"
check "--top 1: one site and the rest" "grep -q 'fresh' \"$tmp/top.out\" && ! grep -q 'train.py:10 grow' \"$tmp/top.out\" && grep -q '3 more sites' \"$tmp/top.out\""

# JSON: valid, the shape, and the figures add up.
"$gpumem" diff "$tmp/steps.trace.tsv" --json --top 2 >"$tmp/steps.json"
check "--json exits 0" "[ $? -eq 0 ]"
check "--json: shape and figures" "python3 - \"$tmp/steps.json\" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j['mode'] == 'steps', j['mode']
assert (j['from']['step'], j['to']['step']) == (1, 3)
assert j['from']['steps']['method'] == 'step-events'
assert [s['site'] for s in j['sites']] == ['train.py:30 fresh', 'train.py:10 grow'], j['sites']
assert j['sites'][0]['change'] == 'new' and j['sites'][0]['delta_bytes'] == 4 << 20
assert j['not_shown'] == {'sites': 2, 'delta_bytes': -(2 << 20)}, j['not_shown']
assert j['counts']['gone'] == 1 and j['counts']['matched'] == 2
shown = sum(s['delta_bytes'] for s in j['sites'])
assert shown + j['not_shown']['delta_bytes'] == j['total']['delta_bytes'] == 4 << 20
PY"

# Two runs.
"$gpumem" diff "$tmp/steps.trace.tsv" "$tmp/other.trace.tsv" >"$tmp/runs.out" 2>&1
check "runs: exit 0" "[ $? -eq 0 ]"
check "runs: says how many sites matched" "grep -q 'sites matched by name (file:line function): 2; only in the first run: 1, only in the second: 0' \"$tmp/runs.out\""
check "runs: each at its last step end" "grep -q 'from: .*end of step 3 of 3' \"$tmp/runs.out\" && grep -q 'to: .*other.trace.tsv, end of step 1 of 1' \"$tmp/runs.out\""
check "runs: growth across runs" "grep -q '3.00 MiB *5.00 MiB *+2.00 MiB  train.py:10 grow' \"$tmp/runs.out\""
"$gpumem" diff "$tmp/steps.trace.tsv" "$tmp/other.trace.tsv" --from 1 --json >"$tmp/runs.json"
check "runs --json: --from picks the first run's step" "python3 -c \"import json,sys; j=json.load(open(sys.argv[1])); assert j['mode']=='runs' and j['from']['step']==1 and j['to']['step']==1 and j['counts']['matched']==2, j\" \"$tmp/runs.json\""

# HTML.
"$gpumem" diff "$tmp/steps.trace.tsv" --html "$tmp/d.html" >"$tmp/html.out"
check "--html: written, self-contained, with the data" \
  "[ -s \"$tmp/d.html\" ] && ! grep -q '<script src=\|<link \|GPUMEM_DATA\*/' \"$tmp/d.html\" && grep -q 'train.py:30 fresh' \"$tmp/d.html\""
check "--html: the terminal output says where" "grep -q 'HTML diff: .*d.html' \"$tmp/html.out\""

# A real trace: the figures are consistent.
"$gpumem" diff "$data/leaky_mlp.trace.tsv.gz" --from 2 --to 10 --top 0 --json >"$tmp/leaky.json"
check "real trace: exit 0" "[ $? -eq 0 ]"
check "real trace: per-site deltas add up to the total; the leak grows most" "python3 - \"$tmp/leaky.json\" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
sites = j['sites']
assert j['not_shown']['sites'] == 0
assert sum(s['delta_bytes'] for s in sites) == j['total']['delta_bytes']
assert sum(s['from_bytes'] for s in sites) == j['from']['live_bytes'] == j['total']['from_bytes']
assert sum(s['to_bytes'] for s in sites) == j['to']['live_bytes'] == j['total']['to_bytes']
assert all(s['to_bytes'] - s['from_bytes'] == s['delta_bytes'] for s in sites)
assert sites[0]['site'] == 'capture.py:78 leaky_mlp' and sites[0]['delta_bytes'] > 0, sites[0]
assert j['from']['steps']['method'] in ('annotations', 'inferred', 'step-events')
PY"
"$gpumem" diff "$data/leaky_mlp.trace.tsv.gz" >"$tmp/leaky.out"
check "real trace: terminal table with a totals line" "grep -q ' total (' \"$tmp/leaky.out\""

# Help and bad input.
"$gpumem" diff --help >"$tmp/help" 2>&1
check "--help exits 0 and explains usage" "[ $? -eq 0 ] && grep -q -- '--from' \"$tmp/help\" && grep -q 'Two runs' \"$tmp/help\""
expect_bad_input "missing trace" "$tmp/nope.trace.tsv"
check "missing trace: names the file" "grep -q 'gpumem diff: .*nope.trace.tsv' \"$tmp/err\""
expect_bad_input "step past the end" "$tmp/steps.trace.tsv" --to 4
check "step past the end: says the range" "grep -q -- '--to 4: .*steps.trace.tsv has step ends 1..3' \"$tmp/err\""
expect_bad_input "step 0" "$tmp/steps.trace.tsv" --from 0
expect_bad_input "negative step" "$tmp/steps.trace.tsv" --from -1
expect_bad_input "trace without steps" "$tmp/nosteps.trace.tsv"
check "trace without steps: says so" "grep -q 'has no step ends (steps: none)' \"$tmp/err\""
expect_bad_input "second run's step out of range" "$tmp/steps.trace.tsv" "$tmp/other.trace.tsv" --to 2
check "second run's step out of range: names that run" "grep -q -- '--to 2: .*other.trace.tsv has step ends 1..1' \"$tmp/err\""
expect_usage_error "three traces" "$tmp/steps.trace.tsv" "$tmp/steps.trace.tsv" "$tmp/steps.trace.tsv"
expect_usage_error "bad --top" "$tmp/steps.trace.tsv" --top many
expect_bad_input "bad --step-site" "$tmp/steps.trace.tsv" --step-site train.py
expect_usage_error "no trace" 
expect_bad_input "HTML not writable" "$tmp/steps.trace.tsv" --html "$tmp/no/such/dir/d.html" --json
exit $fail
