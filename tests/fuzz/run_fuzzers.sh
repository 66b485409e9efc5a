#!/usr/bin/env bash
# Runs every libFuzzer target of tests/fuzz with run_fuzzer.sh, JOBS at a time (a target uses one
# core), from its committed seeds:
#   tests/fuzz/run_fuzzers.sh BUILD_DIR SECONDS JOBS
# Each target's report is printed whole when it finishes; its work directory is
# BUILD_DIR/work/<target> (stats, log, new inputs, crashes). Exits non-zero when any target
# crashed, hung, leaked or ran out of memory.
set -uo pipefail
build=$1 seconds=$2 jobs=$3
here=$(cd "$(dirname "$0")" && pwd)
targets=()
for src in "$here"/fuzz_*.cc; do
  name=$(basename "$src" .cc)
  targets+=("${name#fuzz_}")
done
mkdir -p "$build/work"
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I '{}' bash -c '
  out="$1/work/$2.out"
  bash "$3/run_fuzzer.sh" "$1/tests/fuzz/fuzz_$2" "$3/corpus/$2" "$4" "$1/work/$2" >"$out" 2>&1
  rc=$?
  cat "$out"
  exit $((rc == 0 ? 0 : 1))
' _ "$build" '{}' "$here" "$seconds"
