#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang in a build directory
# of their own and runs each for a bounded time from its checked-in seed
# corpus. New inputs the fuzzer finds go to BUILD_DIR/corpus/<target>; a
# crash, a sanitizer report or a broken promise fails the run and leaves its
# input in BUILD_DIR/artifacts/<target>/ (reproduce: BUILD_DIR/fuzz/<target>_fuzz FILE).
#   run-fuzz.sh [SECONDS_PER_TARGET [BUILD_DIR]]    (make fuzz; 30 s, build-fuzz)
# 0 seconds only builds (make fuzz-corpus).
set -euo pipefail
seconds=${1:-30}
build_dir=${2:-build-fuzz}
jobs=${JOBS:-$(nproc)}
cd "$(dirname "$0")/.."
targets=(submission_ring request_validator cuda_registration segment_header)

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
CC=clang CXX=clang++ cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCOLLECTIVE_FUZZ=ON -DCOLLECTIVE_BUILD_TESTS=OFF -DCOLLECTIVE_BUILD_PYTHON=OFF \
  -DCOLLECTIVE_GPU=OFF "${launcher[@]}" >/dev/null
cmake --build "$build_dir" -j "$jobs" --target fuzz_targets
[ "$seconds" -gt 0 ] || exit 0

failed=()
for target in "${targets[@]}"; do
  mkdir -p "$build_dir/corpus/$target" "$build_dir/artifacts/$target"
  echo "fuzz: $target for ${seconds}s"
  # The first directory receives what the run finds; the seeds are read only.
  if ! "$build_dir/fuzz/${target}_fuzz" -max_total_time="$seconds" -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$build_dir/artifacts/$target/" \
      "$build_dir/corpus/$target" "tests/fuzz/corpus/$target" \
      >"$build_dir/artifacts/$target.log" 2>&1; then
    failed+=("$target")
    tail -n 60 "$build_dir/artifacts/$target.log" >&2
  fi
  grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb)|^#[0-9]+ *DONE' \
    "$build_dir/artifacts/$target.log" | sed "s/^/fuzz: $target: /" || true
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]} (inputs in $build_dir/artifacts/)" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, nothing found"
