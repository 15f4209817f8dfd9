#!/bin/sh
# `gpumem run --profile-only` sets GPUMEM_MODE=profile for the program; a bad GPUMEM_MODE
# stops `gpumem run` before the program starts (exit 2, accepted values named).
# usage: run_cli_test.sh path/to/gpumem
set -u
cli=$1
fail() { echo "FAIL: $*"; exit 1; }
mode=$("$cli" run --profile-only -- sh -c 'echo "$GPUMEM_MODE"') || fail "run --profile-only exited $?"
[ "$mode" = profile ] || fail "GPUMEM_MODE in the program is '$mode', expected profile"
mode=$(env -u GPUMEM_MODE "$cli" run -- sh -c 'echo "${GPUMEM_MODE:-unset}"') || fail "run exited $?"
[ "$mode" = unset ] || fail "plain run set GPUMEM_MODE='$mode'"
err=$(GPUMEM_MODE=sample "$cli" run -- sh -c 'echo ran' 2>&1)
rc=$?
[ $rc -eq 2 ] || fail "bad GPUMEM_MODE: exit $rc, expected 2 ($err)"
case $err in
  *"GPUMEM_MODE='sample': expected allocator or profile"*) ;;
  *) fail "bad GPUMEM_MODE message: $err" ;;
esac
case $err in *ran*) fail "the program ran despite the bad GPUMEM_MODE" ;; esac
echo PASS
