#!/usr/bin/env bash
# `gpumem dump` on a fresh trace, a cut one (warning on stderr, events still printed) and
# a file that is not a trace (one-line error, exit 2).
# Usage: dump_cli_test.sh GPUMEM SAMPLE_TRACE_PROGRAM
set -u
gpumem="$1"; sample="$2"
dir="$(mktemp -d)"; trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$sample" "$dir/t.gpumem" || fail "sample trace program failed"
"$gpumem" dump --stacks "$dir/t.gpumem" > "$dir/out" 2> "$dir/err" || fail "dump exit $?"
[ "$(grep -c $'\talloc\t' "$dir/out")" = 100 ] || fail "expected 100 alloc lines"
grep -q $'\tfree_requested\t.*addr=0x7f0000000000' "$dir/out" || fail "free line missing"
grep -q $'\tstep\t.*step=1' "$dir/out" || fail "step line missing"
grep -q $'\tfailed_alloc\tdevice=0\tcuMemAlloc\tsize=268435456\tCUDA_ERROR_OUT_OF_MEMORY' "$dir/out" \
  || fail "failed call line missing: $(grep failed "$dir/out")"
grep -q '    at Linear.forward (model.py:42)' "$dir/out" || fail "--stacks frame missing"
grep -q '^# pid=' "$dir/out" || fail "header missing"
[ -s "$dir/err" ] && fail "unexpected stderr: $(cat "$dir/err")"

# Cut inside the fourth chunk from the end (the records are in several chunks after the
# journal region): complete chunks still print, the warning goes to stderr.
cut=$(grep -obUa GMCK "$dir/t.gpumem" | cut -d: -f1 | tail -n 4 | head -n 1)
head -c $((cut + 10)) "$dir/t.gpumem" > "$dir/cut.gpumem"
"$gpumem" dump "$dir/cut.gpumem" > "$dir/out" 2> "$dir/err" || fail "dump of a cut file exit $?"
grep -q 'warning: .*did not finish' "$dir/err" || fail "no recovery warning: $(cat "$dir/err")"
n=$(grep -c $'\talloc\t' "$dir/out")
{ [ "$n" -gt 0 ] && [ "$n" -lt 100 ]; } || fail "cut file printed $n allocs"

# Killed by SIGKILL with records not yet compressed: all 100 allocs print, and the
# warning says how many came from the raw journal.
"$sample" "$dir/killed.gpumem" killed 2>/dev/null
"$gpumem" dump "$dir/killed.gpumem" > "$dir/out" 2> "$dir/err" || fail "dump of a killed run exit $?"
grep -q 'warning: .*did not finish.* from the raw journal' "$dir/err" || fail "no journal recovery: $(cat "$dir/err")"
n=$(grep -c $'\talloc\t' "$dir/out")
[ "$n" = 100 ] || fail "killed run printed $n allocs, expected 100"

# Not a trace: one line, exit 2.
printf '\x89GPUMEM\n\x07\x00\x00\x00\x00\x00\x00\x00' > "$dir/bad.gpumem"
"$gpumem" dump "$dir/bad.gpumem" > /dev/null 2> "$dir/err"; status=$?
[ "$status" = 2 ] || fail "bad version: exit $status"
[ "$(wc -l < "$dir/err")" = 1 ] || fail "error is not one line: $(cat "$dir/err")"
grep -q 'bad.gpumem' "$dir/err" || fail "error does not name the file"
"$gpumem" dump "$dir/missing.gpumem" > /dev/null 2>&1; status=$?
[ "$status" = 2 ] || fail "missing file: exit $status"
echo "dump cli ok"
