#!/usr/bin/env bash
# Runs the whole test suite of a build directory: unit tests in parallel, then
# the tests that start real daemons and client processes one at a time (they
# oversubscribe the cores on their own).
set -euo pipefail
build_dir=${1:-build}
cd "$build_dir"
ctest --output-on-failure --timeout 300 -j "$(nproc)" -L unit
ctest --output-on-failure --timeout 600 -LE unit
