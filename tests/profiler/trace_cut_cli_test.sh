#!/usr/bin/env bash
# Every command that reads a trace treats a cut one alike (docs/trace-format.md, What a
# cut costs): with events before the cut, dump, report, export and replay print the same
# warning on stderr, naming the events kept and the bytes lost, and exit 0; with none,
# each prints a one-line error and exits 2. `report --json` carries the loss.
# Usage: trace_cut_cli_test.sh GPUMEM TEST_DATA_DIR
set -u
gpumem="$1"; data="$2"
dir="$(mktemp -d)"; trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
trace="$data/leaky_mlp_pair.gpumem"
size=$(stat -c %s "$trace")

# Runs the four commands on $1; leaves their exit statuses in $statuses, stderr in $dir/*.err.
run_all() {
  "$gpumem" dump "$1" > /dev/null 2> "$dir/dump.err"; local d=$?
  "$gpumem" report "$1" > /dev/null 2> "$dir/report.err"; local r=$?
  "$gpumem" export --format perfetto "$1" -o "$dir/out.json" > /dev/null 2> "$dir/export.err"; local e=$?
  "$gpumem" replay "$1" > /dev/null 2> "$dir/replay.err"; local p=$?
  statuses="$d $r $e $p"
}

# Half the file: a readable prefix.
head -c $((size / 2)) "$trace" > "$dir/half.gpumem"
run_all "$dir/half.gpumem"
[ "$statuses" = "0 0 0 0" ] || fail "a readable prefix: exit statuses $statuses, expected 0 0 0 0"
line=$(grep -m1 '^warning: .*did not finish' "$dir/dump.err") || fail "dump: no loss warning: $(cat "$dir/dump.err")"
echo "$line" | grep -q 'recovered [1-9][0-9]* events' || fail "the warning names no events kept: $line"
echo "$line" | grep -q 'lost [0-9]* bytes' || fail "the warning names no bytes lost: $line"
for cmd in report export replay; do
  grep -qxF -- "$line" "$dir/$cmd.err" || fail "$cmd does not say it in the same words: $(cat "$dir/$cmd.err")"
done
"$gpumem" report --json "$dir/half.gpumem" 2> /dev/null > "$dir/report.json" || fail "report --json exit $?"
python3 - "$dir/report.json" <<'PY' || fail "report --json has no loss"
import json, sys
loss = json.load(open(sys.argv[1]))["loss"]
assert loss["events_kept"] > 0 and loss["bytes_lost"] > 0 and "recovered" in loss["summary"], loss
PY

# Cut inside the header chunk's neighbourhood: nothing readable.
head -c 200 "$trace" > "$dir/none.gpumem"
run_all "$dir/none.gpumem"
[ "$statuses" = "2 2 2 2" ] || fail "nothing readable: exit statuses $statuses, expected 2 2 2 2"
for cmd in dump report export replay; do
  [ "$(wc -l < "$dir/$cmd.err")" = 1 ] || fail "$cmd: error is not one line: $(cat "$dir/$cmd.err")"
  grep -q 'none.gpumem: no event is readable' "$dir/$cmd.err" || fail "$cmd: $(cat "$dir/$cmd.err")"
done

# The whole file: no warning, and report --json says loss null.
run_all "$trace"
[ "$statuses" = "0 0 0 0" ] || fail "whole trace: exit statuses $statuses"
for cmd in dump report export replay; do
  grep -q 'did not finish' "$dir/$cmd.err" && fail "$cmd warns on a whole trace: $(cat "$dir/$cmd.err")"
done
"$gpumem" report --json "$trace" 2> /dev/null | python3 -c 'import json,sys; assert json.load(sys.stdin)["loss"] is None' \
  || fail "report --json of a whole trace: loss is not null"
echo "cut cli ok"
