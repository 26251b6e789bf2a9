#!/usr/bin/env bash
# Second README command: set up, build, and run every test (unit + integration), then
# the integration suite again against an AddressSanitizer + UBSan build of the binary
# (a memory error or undefined behaviour aborts the gateway, so the tests fail); that
# build compiles in the background while the first passes run.
# TAHUA_SKIP_SANITIZERS=1 skips that second pass (quicker local runs).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's wall time, printed at the end (docs/benchmarks.md, "Build", keeps the goal).
phase_name="" phase_start=$SECONDS phase_times=""
phase() {
  [ -n "$phase_name" ] && phase_times+="$phase_name $((SECONDS - phase_start)) s; "
  phase_name=$1 phase_start=$SECONDS
  [ -z "$1" ] || echo "== $1"
}
phase "setup (packages, build, npm)"
scripts/bootstrap.sh --test
# A build directory configured by scripts/start.sh (no GoogleTest then) is configured
# again, so that it finds what --test installed.
[ -f build/build.ninja ] && cmake build >/dev/null
# What the passes run: the gateway, the unit tests and the fuzz replays (not bench/'s
# micro-benchmarks: the bench scripts build them when they run).
scripts/build.sh --target tahua tahua_unit_tests fuzz_replay
[ -x build/tahua_unit_tests ] || { echo "test.sh: the unit tests were not built (GoogleTest missing?)" >&2; exit 1; }
(cd tests && npm ci --no-audit --no-fund --loglevel=error)

status=0
# Each pass's output is kept, so the end of the run names what failed (CI shows its tail).
logs=$(mktemp -d)
san_pid=""
trap '[ -n "$san_pid" ] && kill -- "-$(cat "$logs/sanitize-group" 2>/dev/null)" 2>/dev/null; rm -rf "$logs"' EXIT

sanitize=1
[ "${TAHUA_SKIP_SANITIZERS:-0}" = 1 ] && sanitize=0
if [ "$sanitize" = 1 ]; then
  # The ASan+UBSan build compiles while the first passes run (they mostly wait on sockets),
  # one job at the lowest priority, so that the tests keep the CPU they ask for and a
  # core is left to them whatever the compiler does to the memory bus.
  export CCACHE_BASEDIR="$PWD"
  # Asio's recycling of coroutine frames and handler memory is off here: ASan then sees
  # every frame as its own allocation (a use after free inside a recycled block is
  # invisible to it). With recycling on, this -O1 sanitizer build corrupted session
  # frames although the same build without recycling is clean under ASan (see
  # docs/design.md, "Asio tuning"). Configured every run, so flag changes apply.
  # -O0 -g1: the build is a third of -O1 -g's (GCC's optimiser and variable tracking over
  # Asio's coroutine templates took 330 s for realtime_relay.cpp alone, 80 s so); ASan
  # reports keep file and line, and the suite waits on sockets, not on the gateway's CPU.
  cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
    -DCMAKE_CXX_FLAGS="-O0 -fsanitize=address,undefined -fno-omit-frame-pointer -DBOOST_ASIO_DISABLE_SMALL_BLOCK_RECYCLING" \
    -DCMAKE_CXX_FLAGS_DEBUG="-g1" -DCMAKE_EXE_LINKER_FLAGS="-no-pie" \
    -DBUILD_TESTING=OFF -DTAHUA_BENCH=OFF >/dev/null
  # Its own session (setsid), so that it can be stopped whole, compilers included: the
  # group's id is written first (setsid forks when it must, and --wait keeps $! its parent).
  setsid --wait sh -c 'echo $$ >"$1"; exec nice -n 19 cmake --build build-sanitize -j 1 --target tahua fuzz_replay' \
    sh "$logs/sanitize-group" >"$logs/sanitize-build" 2>&1 &
  san_pid=$!
fi

# Two test files at a time: they mostly wait on sockets and child processes, and every
# file takes its ports from the kernel (port 0) or below the ephemeral range (closedPort),
# so two never meet. TAHUA_TEST_CONCURRENCY=1 runs them one by one.
jobs=${TAHUA_TEST_CONCURRENCY:-2}

phase "unit tests (ctest)"
ctest --test-dir build --output-on-failure -j "$(nproc)" 2>&1 | tee "$logs/unit" || status=1
phase "integration tests (node --test, real tahua binary)"
TAHUA_BIN="$PWD/build/tahua" node --test --test-concurrency="$jobs" tests/integration/ 2>&1 | tee "$logs/integration" || status=1

if [ "$sanitize" = 1 ]; then
  phase "the ASan+UBSan build (the rest of it)"
  # Nothing else runs now: what is left of it is built with every core. Ninja keeps what
  # the one-job build finished (a command cut short is not in its log, so it runs again).
  san_ok=1
  if kill -0 "$san_pid" 2>/dev/null; then
    kill -TERM -- "-$(cat "$logs/sanitize-group")" 2>/dev/null || true
    wait "$san_pid" 2>/dev/null || true
    cmake --build build-sanitize -j "$(nproc)" --target tahua fuzz_replay >>"$logs/sanitize-build" 2>&1 || san_ok=0
  else
    wait "$san_pid" || san_ok=0
  fi
  if [ "$san_ok" = 0 ]; then
    tail -60 "$logs/sanitize-build"
    echo "sanitize build: FAILED"
    exit 1
  fi
  san_pid=""
  tail -1 "$logs/sanitize-build"
  phase "integration tests against the ASan+UBSan binary"
  # report_globals=0: the runtime does not register the binary's globals at each start
  # (`--version` 0.30 s with it, 0.06 s without; the suite starts a gateway per test:
  # 8 files took 50 s with it, 41 s without). It gives up the overflow check of global
  # arrays, which the fuzz replays below keep; heap, stack and use-after-free are
  # checked as before, and UBSan's bounds check still covers arrays of known size.
  TAHUA_BIN="$PWD/build-sanitize/tahua" \
    ASAN_OPTIONS=report_globals=0:detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    node --test --test-concurrency="$jobs" tests/integration/ 2>&1 | tee "$logs/sanitizer" || status=1
  # The fuzz seeds and every kept crash once more (ctest replayed them without sanitizers):
  # a read past a buffer or UB that does not crash is caught here. Leaks are checked.
  phase "fuzz corpora replayed against the ASan+UBSan build"
  for exe in build-sanitize/fuzz/fuzz_replay_*; do
    t="${exe##*/fuzz_replay_}"
    if out=$(ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
               "$exe" "fuzz/corpus/$t" "fuzz/regressions/$t" 2>&1); then
      echo "fuzz_replay_$t: ${out##*$'\n'}"
    else
      printf '%s\n' "$out" | tail -40
      echo "fuzz_replay_$t: FAILED"
      status=1
    fi
  done
fi
phase ""
echo "== time: ${phase_times}all $SECONDS s"
if [ "$status" != 0 ]; then
  echo "== what failed"
  for pass in unit integration sanitizer; do
    [ -f "$logs/$pass" ] || continue
    grep -E '^\s*not ok |\(Failed\)|\(SEGFAULT\)|\(Timeout\)|Subprocess aborted' "$logs/$pass" | grep -v '# SKIP' | sed "s/^/$pass: /" || true
  done
  # Each failed test's place and the first lines of its error: CI shows only this tail,
  # and a failure that does not come back locally needs them.
  for pass in integration sanitizer; do
    [ -f "$logs/$pass" ] || continue
    awk -v pass="$pass" '
      /^ *not ok / { name = $0; sub(/^ */, "", name); keep = 1; err = 0; next }
      keep && /^ *location:/ { loc = $0; sub(/^ *location: */, "", loc); next }
      keep && /^ *error: / { err = 1; n = 0; print pass ": " name " at " loc; next }
      keep && /^ *stack:/ { err = 0; st = 1; next }
      keep && st && /\.test\.mjs:[0-9]+/ { line = $0; sub(/^ */, "", line); print "    at " line; st = 0; next }
      keep && err && /^ *(code|name|failureType|expected|actual|operator|cause):/ { err = 0; next }
      keep && err && n < 8 { line = $0; sub(/^ */, "", line); if (line != "") { print "    " line; ++n } next }
      /^ *\.\.\.$/ { keep = 0; err = 0; st = 0 }
    ' "$logs/$pass"
  done
fi
exit $status
