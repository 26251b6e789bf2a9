#!/usr/bin/env bash
# Second README command: set up, build, and run every test (unit + integration).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --test
scripts/build.sh
(cd tests && npm ci --no-audit --no-fund --loglevel=error)

status=0
echo "== unit tests (ctest)"
ctest --test-dir build --output-on-failure -j "$(nproc)" || status=1
echo "== integration tests (node --test, real tahua binary)"
TAHUA_BIN="$PWD/build/tahua" node --test --test-concurrency=1 tests/integration/ || status=1
exit $status
