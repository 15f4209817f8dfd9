#!/bin/sh
# `gpumem run --profile-only` sets GPUMEM_MODE=profile for the program; a bad GPUMEM_MODE
# or GPUMEM_TRACE_MAX stops `gpumem run` before the program starts (exit 2, accepted values
# named).
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
# So does a bounded trace's size that is not one, or too small to hold a segment.
for bad in 12Q 1M; do
  err=$(GPUMEM_TRACE_MAX=$bad "$cli" run -- sh -c 'echo ran' 2>&1)
  rc=$?
  [ $rc -eq 2 ] || fail "GPUMEM_TRACE_MAX=$bad: exit $rc, expected 2 ($err)"
  case $err in
    *"GPUMEM_TRACE_MAX='$bad': expected a size of at least 16M"*) ;;
    *) fail "GPUMEM_TRACE_MAX=$bad message: $err" ;;
  esac
  case $err in *ran*) fail "the program ran despite GPUMEM_TRACE_MAX=$bad" ;; esac
done
# A traced run loads the CUPTI tracer from GPUMEM_LIB_DIR, unless --no-cupti or the user
# already set CUDA_INJECTION64_PATH; an untraced run does not.
libs=$(mktemp -d)
trap 'rm -rf "$libs"' EXIT
: >"$libs/libgpumem_cupti.so"
inj() { env -u CUDA_INJECTION64_PATH GPUMEM_LIB_DIR="$libs" "$cli" run "$@" -- sh -c 'echo "${CUDA_INJECTION64_PATH:-unset}"'; }
got=$(inj --trace "$libs/t.gpumem") || fail "traced run exited $?"
[ "$got" = "$libs/libgpumem_cupti.so" ] || fail "traced run: CUDA_INJECTION64_PATH='$got'"
got=$(inj --trace "$libs/t.gpumem" --no-cupti) || fail "--no-cupti run exited $?"
[ "$got" = unset ] || fail "--no-cupti set CUDA_INJECTION64_PATH='$got'"
got=$(GPUMEM_TRACE= inj) || fail "untraced run exited $?"
[ "$got" = unset ] || fail "untraced run set CUDA_INJECTION64_PATH='$got'"
got=$(CUDA_INJECTION64_PATH=/mine.so GPUMEM_LIB_DIR="$libs" "$cli" run --trace "$libs/t.gpumem" -- sh -c 'echo "$CUDA_INJECTION64_PATH"')
[ "$got" = /mine.so ] || fail "a user's CUDA_INJECTION64_PATH was replaced by '$got'"
echo PASS
