#!/usr/bin/env bash
# Configures (once) and builds tahua with Ninja and ccache. BUILD_TYPE defaults to Release.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${BUILD_DIR:-build}"
build_type="${BUILD_TYPE:-Release}"
export CCACHE_BASEDIR="$PWD"  # cache hits across clones (absolute -I paths)
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="$build_type" \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
fi
cmake --build "$build_dir" -j "$(nproc)" "$@"
