#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the libFuzzer targets (preset `fuzz`: clang, ASan + UBSan) and runs
# each for SECONDS (default 30) from the seed corpora in tests/fuzz/corpus/.
# Prints one line per target (executions, coverage) and exits non-zero if any
# target found a crash, leak, timeout or sanitizer report (the input is kept
# under build/fuzz/artifacts/). docs/reliability.md.
#   tools/fuzz.sh [SECONDS] [target ...]      e.g. tools/fuzz.sh 600 fuzz_safetensors
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"
cd "$SNUG_ROOT"

secs="${1:-30}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cd tests/fuzz && ls fuzz_*.cpp | sed 's/\.cpp$//')
fi

scripts/install_deps.sh --fuzz
snug_configure_preset fuzz >/dev/null
cmake --build build/fuzz -j"$(snug_jobs)" --target "${targets[@]}"

mkdir -p build/fuzz/artifacts build/fuzz/work
status=0
printf '%-22s %8s %12s %10s %10s  %s\n' target seconds executions "cov edges" features result
for t in "${targets[@]}"; do
  bin="build/fuzz/tests/fuzz/$t"
  seeds="tests/fuzz/corpus/$t"
  work="build/fuzz/work/$t"
  mkdir -p "$seeds" "$work"
  # Seeds come from snug's own writers (each target's LLVMFuzzerInitialize).
  if [ -z "$(ls -A "$seeds")" ]; then SNUG_FUZZ_SEEDS="$seeds" "$bin" -runs=0 >/dev/null 2>&1; fi
  log="build/fuzz/$t.log"
  rc=0
  ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1" UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
    "$bin" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="build/fuzz/artifacts/$t-" "$work" "$seeds" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n1 | awk '{print $2}')
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -n1 | awk '{print $2}')
  if [ "$rc" -eq 0 ]; then result=ok; else result="FAILED (exit $rc, see $log)"; status=1; fi
  printf '%-22s %8s %12s %10s %10s  %s\n' "$t" "$secs" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$result"
done
exit $status
