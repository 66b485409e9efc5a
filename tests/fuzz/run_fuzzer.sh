#!/usr/bin/env bash
# Runs one libFuzzer target for a fixed time from its committed seeds and reports what it did:
#   tests/fuzz/run_fuzzer.sh BINARY SEED_DIR SECONDS WORK_DIR
# The seeds are read, never written: new inputs go to WORK_DIR/corpus, a crash to
# WORK_DIR/crash-* (rerun it with `BINARY WORK_DIR/crash-...`). Prints one line
# "fuzz <target>: <N> executions in <S>s, ..." (also written to WORK_DIR/stats) and exits non-zero
# when the target crashed, hung, leaked or ran out of memory.
set -uo pipefail
bin=$1 seeds=$2 seconds=$3 work=$4
name=$(basename "$bin")
rm -rf "$work"
mkdir -p "$work/corpus" "$seeds"
# -timeout: one input taking this long is a hang. -malloc_limit_mb: no decoder needs a 16 MiB
# block for an input of at most 8 KiB, so a larger one means it sized a buffer from a length
# field instead of from the bytes that arrived. The store and control-channel targets log every
# dropped connection; only errors are worth printing.
HORA_LOG_LEVEL=error "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -malloc_limit_mb=16 -max_len=8192 -print_final_stats=1 -artifact_prefix="$work/" \
  "$work/corpus" "$seeds" >"$work/log" 2>&1
rc=$?
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
seeded=$(find "$seeds" -type f 2>/dev/null | wc -l)
found=$(find "$work/corpus" -type f | wc -l)
line="fuzz ${name#fuzz_}: ${execs:-0} executions in ${seconds}s, ${seeded} seeds, ${found} new inputs kept"
if [ $rc -ne 0 ]; then
  # The summary table shows only the stats line: it names the failure too, so that a CI run
  # whose full log is gone still says which target failed and how.
  why=$(grep -m1 -E 'ERROR: |deadly signal|SUMMARY: |fuzz_[a-z_]+: ' "$work/log" | cut -c1-160)
  line="$line; FAILED (exit $rc): ${why:-see its log}"
fi
echo "$line" | tee "$work/stats"
if [ $rc -ne 0 ]; then
  echo "$name FAILED (exit $rc); the end of its log:"
  tail -60 "$work/log"
  # The failing input itself (at most max_len bytes), to rerun it where the artifact is gone:
  # base64 -d > input && BINARY input.
  for artifact in "$work"/crash-* "$work"/timeout-* "$work"/oom-* "$work"/leak-*; do
    [ -f "$artifact" ] || continue
    echo "$(basename "$artifact") as base64:"
    base64 -w 0 "$artifact"
    echo
  done
fi
exit $rc
