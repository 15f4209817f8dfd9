#!/usr/bin/env bash
# Hostile input for every command that reads a trace (docs/reliability.md, Reading
# hostile input): generated bombs, cuts, bit flips, sizes no device has, odd paths and a
# full disk. Each case ends in a result or a one-line error with exit status 2, in bounded
# time and memory, never a crash; a cut or damaged trace is said alike by every command.
# usage: hostile_input_test.sh GPUMEM_BINARY TEST_DATA_DIR
set -uo pipefail
gpumem=$1
data=$2
source "$(dirname "$0")/../cli_check.sh"
has() { grep -q -- "$1" "$tmp/err"; }

# --- Bounded memory and time -------------------------------------------------------------
# A pickle header and 1.5 GB of zeros, compressed to a few hundred kB.
(printf '\x80\x04\x95'; head -c 1500M /dev/zero) | zstd -q -1 >"$tmp/bomb.pickle.zst"
GPUMEM_MAX_INPUT=64MiB run_bad_input "zstd bomb, 64 MiB limit" report "$tmp/bomb.pickle.zst"
check "bomb: the limit is named" "has 'more than 64 MiB of input once decompressed (zstd)' && has GPUMEM_MAX_INPUT"
(printf '\x80\x04\x95'; head -c 300M /dev/zero) | gzip -1 >"$tmp/bomb.pickle.gz"
GPUMEM_MAX_INPUT=100M run_bad_input "gzip bomb, 100 MiB limit" dump "$tmp/bomb.pickle.gz"
check "gzip bomb: the limit is named" "has 'more than 100 MiB of input once decompressed (gzip)'"
# Under the default limit (4 GiB), a machine with less memory: an error, not an abort.
(ulimit -v 1000000; "$gpumem" report "$tmp/bomb.pickle.zst" >"$tmp/out" 2>"$tmp/err"); rc=$?
check "bomb over the memory there is: exit 2 (got $rc)" "[ $rc -eq 2 ]"
check "bomb over the memory there is: says out of memory" "has 'out of memory' && ! has terminate"
GPUMEM_MAX_INPUT=lots run_bad_input "a GPUMEM_MAX_INPUT that is no size" report "$data/leaky_mlp.trace.tsv.gz"
check "bad GPUMEM_MAX_INPUT is named" "has \"GPUMEM_MAX_INPUT='lots'\""
start=$SECONDS
timeout 60 "$gpumem" report /dev/zero >"$tmp/out" 2>"$tmp/err"; rc=$?
check "report /dev/zero ends with exit 2 (got $rc) within 60 s" "[ $rc -eq 2 ]"
check "/dev/zero: binary data, not a .tsv" "has 'binary data' && has 'not a .tsv trace'"
timeout 60 "$gpumem" dump /dev/zero >"$tmp/out" 2>"$tmp/err"; rc=$?
check "dump /dev/zero ends with exit 2 (got $rc)" "[ $rc -eq 2 ]"
check "/dev/zero took $((SECONDS - start)) s (under 20)" "[ $((SECONDS - start)) -lt 20 ]"

# --- The .tsv reader ---------------------------------------------------------------------
head -c 3000000 /dev/zero | tr '\0' 'a' >"$tmp/long-line.tsv"
run_bad_input "a 3 MB line" report "$tmp/long-line.tsv"
check "long line: says so" "has 'line 1 is longer than 1048576 bytes'"
# No newline in the binary part: a random one would end the line before its first NUL
# (then the line is only malformed, a different message; 11 of 300 draws).
(printf '0\talloc\t4096\t512\t0\t1\t0\n'; head -c 2000 /dev/urandom | tr -d '\n'; printf '\0') \
  >"$tmp/binary.tsv"
run_bad_input "binary after a good line" report "$tmp/binary.tsv"
check "binary: not a tsv" "has 'not a .tsv trace'"
printf '0\talloc\t4096\t50331648\t0\t1\t0\n1\tfree_completed\t4096\t50331648\t0\t2\t0\n2\talloc\t8192\t50331648\t0\t3\t0\n3\talloc\t1048576\t50' >"$tmp/cut.tsv"
for cmd in dump report replay "export --format perfetto -o $tmp/cut.json"; do
  "$gpumem" $cmd "$tmp/cut.tsv" >"$tmp/out" 2>"$tmp/err.${cmd%% *}"; rc=$?
  check "tsv cut in its last number: $cmd exits 0 (got $rc)" "[ $rc -eq 0 ]"
  check "tsv cut: $cmd says the cut" "grep -qF 'warning: $tmp/cut.tsv: the file ends inside line 4 (no newline after it): cut there; kept the 3 events before it, lost 18 bytes' \"$tmp/err.${cmd%% *}\""
done
"$gpumem" dump "$tmp/cut.tsv" 2>/dev/null | grep -c 'size=' >"$tmp/n"
check "tsv cut: the cut event is not read as 50 bytes" "[ \$(cat \"$tmp/n\") -eq 3 ] && ! \"$gpumem\" dump \"$tmp/cut.tsv\" 2>/dev/null | grep -q 'size=50\$'"

# --- Sizes no device has, sums that could wrap --------------------------------------------
printf '0\talloc\t4096\t9223372036854775808\t0\t1\t0\n' >"$tmp/huge.tsv"
run_bad_input "an allocation of 2^63 bytes" report "$tmp/huge.tsv"
check "2^63: no device has it" "has 'larger than any device' && has 'event 0'"
run_bad_input "2^63, replay" replay "$tmp/huge.tsv"
run_bad_input "2^63, dump" dump "$tmp/huge.tsv"
for i in 0 1 2 3 4 5; do printf '%d\talloc\t%d\t4611686018427387904\t0\t%d\t0\n' $i $((i * 4096)) $i; done >"$tmp/wrap.tsv"
run_bad_input "six blocks of 2^62" report "$tmp/wrap.tsv"
printf '0\talloc\t18446744073709551600\t4096\t0\t1\t0\n' >"$tmp/past-end.tsv"
run_bad_input "a block past the address space" report "$tmp/past-end.tsv"
check "past the address space: says so" "has 'past the 64-bit address space'"
python3 - "$tmp/sum.tsv" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    for i in range(4097):  # each 2^50 bytes (allowed), together past 2^62
        f.write(f"{2*i}\talloc\t0\t{1 << 50}\t0\t{2*i}\t0\n{2*i+1}\tfree_completed\t0\t{1 << 50}\t0\t{2*i+1}\t0\n")
PY
run_bad_input "allocations adding up past 2^62" report "$tmp/sum.tsv"
check "sum: says so" "has 'add up to more than 2^62'"

# --- Pickles nested without bound ----------------------------------------------------------
python3 - "$tmp" <<'PY'
import pickle, sys
deep = []
for _ in range(200):
    deep = [deep]
open(sys.argv[1] + "/deep.pickle", "wb").write(pickle.dumps({"segments": [], "device_traces": [deep]}, protocol=4))
PY
run_bad_input "a pickle nested 200 deep" report "$tmp/deep.pickle"
check "nesting: says so" "has 'nested deeper than 100 levels'"

# --- Odd paths ------------------------------------------------------------------------------
run_bad_input "a folder" report "$tmp"
check "folder: is a directory" "has 'is a directory'"
run_bad_input "a folder, replay" replay "$tmp"
run_bad_input "unknown subcommand" frob
check "frob: unknown subcommand, with the list" "has 'unknown subcommand frob' && has 'report' && has 'replay'"
run_bad_input "--capacity 0" report "$data/leaky_mlp.trace.tsv.gz" --capacity 0
GPUMEM_STACKS=pyhton run_bad_input "run with a misspelt GPUMEM_STACKS" run -- true
check "GPUMEM_STACKS named" "has \"GPUMEM_STACKS='pyhton'\""
GPUMEM_TRACE=$tmp/no/such/folder/run.gpumem run_bad_input "run with GPUMEM_TRACE in a missing folder" run -- true
check "GPUMEM_TRACE: the folder is named" "has 'does not exist'"
run_bad_input "run --trace naming a folder" run --trace "$tmp" -- true
check "--trace folder: is a directory" "has 'is a directory'"

# --- A full disk ----------------------------------------------------------------------------
for cmd in dump report; do
  "$gpumem" $cmd "$data/leaky_mlp.trace.tsv.gz" >/dev/full 2>"$tmp/err"; rc=$?
  check "$cmd >/dev/full: exit 2 (got $rc)" "[ $rc -eq 2 ]"
  check "$cmd >/dev/full: says why" "has 'cannot write to stdout: No space left on device'"
done
run_bad_input "--html on a full disk" report "$data/leaky_mlp.trace.tsv.gz" --html /dev/full
check "--html /dev/full: says why" "has '/dev/full: cannot write: No space left on device'"
run_bad_input "--html in a missing folder" report "$data/leaky_mlp.trace.tsv.gz" --html "$tmp/no/r.html"
check "--html missing folder: says why" "has 'No such file or directory'"
run_bad_input "export to a full disk" export "$data/leaky_mlp.trace.tsv.gz" --format perfetto -o /dev/full
check "export /dev/full: says why" "has 'No space left on device'"

# --- Cuts, bit flips: every command says the same, with the same exit status ----------------
# Runs dump, report, export and replay on $1; fails unless all four exit alike (0 or 2,
# never a crash) and, on 0, print the same warnings on stderr.
same_for_all() {
  local f=$1 name=$2 statuses="" cmd
  for cmd in dump report export replay; do
    case $cmd in
      export) "$gpumem" export --format perfetto -o "$tmp/x.json" "$f" >/dev/null 2>"$tmp/$cmd.err" ;;
      *) "$gpumem" $cmd "$f" >/dev/null 2>"$tmp/$cmd.err" ;;
    esac
    statuses="$statuses $?"
    grep '^warning: ' "$tmp/$cmd.err" | sort >"$tmp/$cmd.warn"
  done
  case "$statuses" in " 0 0 0 0"|" 2 2 2 2") ;; *) check "$name: same exit status (got$statuses)" false; return ;; esac
  for cmd in report export replay; do
    # report and replay may add their own (unpaired allocs and frees): the reader's are in each
    if ! comm -23 "$tmp/dump.warn" "$tmp/$cmd.warn" | grep -q .; then continue; fi
    check "$name: $cmd says what dump says" false
    return
  done
  ok_cases=$((ok_cases + 1))
}
ok_cases=0
trace="$data/leaky_mlp_pair.gpumem"
size=$(wc -c <"$trace")
for k in 1 5 10 25 50 75 90 99; do
  head -c $((size * k / 100)) "$trace" >"$tmp/cut$k.gpumem"
  same_for_all "$tmp/cut$k.gpumem" "cut at $k%"
done
python3 - "$trace" "$tmp" <<'PY'
import random, sys
data = bytearray(open(sys.argv[1], "rb").read())
rng = random.Random(20261125)
for i in range(12):
    d = bytearray(data)
    for _ in range(1 + i % 3):
        at = rng.randrange(16, len(d))
        d[at] ^= 1 << rng.randrange(8)
    open(f"{sys.argv[2]}/flip{i}.gpumem", "wb").write(d)
PY
for i in $(seq 0 11); do same_for_all "$tmp/flip$i.gpumem" "bit flip $i"; done
check "cuts and flips: $ok_cases of 20 alike in every command" "[ $ok_cases -eq 20 ]"
# A damaged chunk in the middle of a finished trace: export and replay say it too.
for i in $(seq 0 11); do
  "$gpumem" dump "$tmp/flip$i.gpumem" >/dev/null 2>"$tmp/err" || continue
  grep -q 'corrupt chunk\|malformed record\|does not decompress' "$tmp/err" || continue
  "$gpumem" replay "$tmp/flip$i.gpumem" >/dev/null 2>"$tmp/replay.err"
  check "damaged chunk (flip $i): replay warns as dump does" "grep -q 'corrupt chunk\|malformed record\|does not decompress' \"$tmp/replay.err\""
  break
done

# --- A doubly allocated address: report and replay treat it alike ---------------------------
printf '0\talloc\t4096\t1024\t0\t1\t0\n1\talloc\t4096\t2048\t0\t2\t0\n2\tfree_completed\t4096\t2048\t0\t3\t0\n3\tfree_completed\t65536\t512\t0\t4\t0\n' >"$tmp/double.tsv"
"$gpumem" replay "$tmp/double.tsv" >/dev/null 2>"$tmp/err"; rc=$?
check "double alloc: replay exits 0 (got $rc)" "[ $rc -eq 0 ]"
check "double alloc: replay says so" "has '1 allocations at an address still live' && has '1 frees of blocks the trace never allocated'"
"$gpumem" report --json "$tmp/double.tsv" >"$tmp/out" 2>/dev/null; rc=$?
check "double alloc: report exits 0 (got $rc)" "[ $rc -eq 0 ]"
check "double alloc: report says it in the same words" "grep -q '1 allocations at an address still live' \"$tmp/out\" && grep -q '1 frees of blocks the trace never allocated' \"$tmp/out\""
exit $fail
