#!/usr/bin/env bash
# First README command: set up, build, and run the gateway on 127.0.0.1:8080.
# With no arguments tahua runs its built-in default config (mock models, no keys needed);
# pass --config FILE to use your own.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
scripts/build.sh --target tahua
exec build/tahua "$@"
