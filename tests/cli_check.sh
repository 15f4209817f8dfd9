# Sourced by the command-line tests (needs $gpumem): a temporary folder $tmp removed at
# exit, `check NAME CONDITION`, and `run_bad_input NAME ARGS...`, which runs gpumem with
# ARGS and checks the rule every subcommand keeps for bad input: exit status 2, one line
# on stderr, no crash output. A test ends with `exit $fail`.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; else echo "ok: $1"; fi; }

run_bad_input() {  # name, args...
  local name=$1; shift
  "$gpumem" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  check "$name: exit 2 (got $rc)" "[ $rc -eq 2 ]"
  check "$name: one line on stderr" "[ \$(wc -l <\"$tmp/err\") -eq 1 ]"
  check "$name: no crash output" "! grep -q -i 'terminate\|Sanitizer\|core dumped' \"$tmp/err\""
}
