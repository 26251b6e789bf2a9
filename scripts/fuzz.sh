#!/usr/bin/env bash
# Real fuzzing of the parsers (not run by CI, which only replays the corpora): builds the
# fuzz targets of fuzz/ with clang++-14, libFuzzer, ASan and UBSan into build-fuzz/, runs
# each target for FUZZ_RUNS executions (default 10,000,000) one after another, and prints
# a summary. See docs/fuzzing.md.
#
#   scripts/fuzz.sh                    # every target
#   scripts/fuzz.sh sse_parser ...     # some targets
#   FUZZ_RUNS=100000 scripts/fuzz.sh   # a quick pass
#   FUZZ_MAX_TIME=1800 scripts/fuzz.sh # also stop each target after 30 minutes
#
# New inputs libFuzzer finds go to a scratch directory (FUZZ_WORK, default
# /tmp/tahua-fuzz/<target>/corpus, then minimized into .../merged), not into the repo:
# fuzz/corpus/ stays the small hand-picked seed set. A crash, leak or UB report stops
# that target; its input is copied to fuzz/regressions/<target>/, where the replay test
# in CI runs it from then on (commit it with the fix).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --fuzz

runs="${FUZZ_RUNS:-10000000}"
time_limit=()
[ -n "${FUZZ_MAX_TIME:-}" ] && time_limit=(-max_total_time="$FUZZ_MAX_TIME")
work="${FUZZ_WORK:-/tmp/tahua-fuzz}"
build=build-fuzz
export CCACHE_BASEDIR="$PWD"

if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  # The list CMake uses (fuzz/targets.cmake): one name per line between the parentheses.
  mapfile -t targets < <(sed -n '/^set(TAHUA_FUZZ_TARGETS/,/^)/{/^  [a-z_]*$/s/ //gp}' fuzz/targets.cmake)
fi

cmake -S fuzz/libfuzzer -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
# At most two jobs: the machines this runs on have two cores, shared.
nice -n 19 cmake --build "$build" -j "${FUZZ_JOBS:-2}" --target "${targets[@]/#/fuzz_}"

# Leaks are checked (libFuzzer's per-input check needs ASan's leak detector); a UBSan
# report aborts, so libFuzzer keeps the input like any crash.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:symbolize=1"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1"

summary=()
status=0
for t in "${targets[@]}"; do
  dir="$work/$t"
  mkdir -p "$dir/corpus" "$dir/artifacts" "$dir/merged" "fuzz/regressions/$t"
  rm -f "$dir/artifacts/"*
  echo "== $t: $runs runs (log: $dir/log)"
  start=$(date +%s)
  rc=0
  # The scratch corpus comes first: libFuzzer writes what it finds into the first
  # directory and only reads the others (the seeds and the kept crashes).
  nice -n 19 "$build/fuzz_$t" -runs="$runs" "${time_limit[@]+"${time_limit[@]}"}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$dir/artifacts/" "$dir/corpus" "fuzz/corpus/$t" "fuzz/regressions/$t" >"$dir/log" 2>&1 || rc=$?
  secs=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/log" | tail -1)
  result=ok
  if [ "$rc" -ne 0 ]; then
    status=1
    found=("$dir/artifacts/"*)
    if [ -e "${found[0]}" ]; then
      cp "${found[@]}" "fuzz/regressions/$t/"
      result="FOUND $(basename "${found[0]}") (copied to fuzz/regressions/$t/)"
    else
      result="exit $rc, no artifact (see the log)"
    fi
    grep -m1 -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error|.*fuzz invariant failed)' "$dir/log" >&2 || true
  else
    [ "${execs:-0}" -lt "$runs" ] && result="ok, stopped at FUZZ_MAX_TIME before $runs runs"
    # Minimized corpus of everything seen (seeds included), for inspection or reseeding.
    nice -n 19 "$build/fuzz_$t" -merge=1 "$dir/merged" "$dir/corpus" "fuzz/corpus/$t" >"$dir/merge.log" 2>&1 || true
  fi
  summary+=("$(printf '%-20s %12s %10s %7ss  %s' "$t" "${execs:-?}" "${rate:-?}" "$secs" "$result")")
done

echo
printf '%-20s %12s %10s %8s  %s\n' target execs exec/s time result
printf '%s\n' "${summary[@]}"
exit $status
