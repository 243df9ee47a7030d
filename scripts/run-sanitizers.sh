#!/usr/bin/env bash
# Builds and runs tests under sanitizers, each kind in a build directory of
# its own (gcc; Debug at -O1, warnings still errors), building only what the
# chosen tests link:
#   build-asan  AddressSanitizer + UndefinedBehaviorSanitizer: the unit tests
#               of every layer up to the executor (the parsers, shared memory,
#               negotiation, the collective ops) and of the Gloo job worlds
#   build-tsan  ThreadSanitizer: the threaded parts (thread pool, engine,
#               runs across nodes, the client's submission outbox)
# Any report fails its test. `make sanitize` runs both; README "Sanitizers
# and fuzzing" says how long they take.
#   run-sanitizers.sh [asan|tsan|all]
set -euo pipefail
which=${1:-all}
jobs=${JOBS:-$(nproc)}
cd "$(dirname "$0")/.."

asan_tests=(half_test reduce_kernels_test config_test request_validator_test process_sets_test
  arena_allocator_test shm_test submission_outbox_test coordinator_test mismatch_test
  negotiator_test response_cache_test global_table_test stall_inspector_test fusion_test
  thread_pool_test work_list_test stream_copy_test collective_ops_test cross_node_run_test allreduce_output_test
  peer_process_test message_matcher_test remote_messages_test message_transfer_test
  bayesian_optimizer_test parameter_manager_test gpu_executor_test gpu_rooted_test
  elastic_world_test host_discovery_test rank_environment_test launcher_options_test
  agent_protocol_test poll_set_test node_layout_test job_test
  gloo_transport_test gloo_control_link_test job_world_test)
# Not gpu_engine_test: its test thread hands the engine fake device memory
# and handles through a client segment it maps a second time in the same
# process, an ordering TSan cannot see (it tracks the ring's atomics by
# address, and the two mappings differ), so it reports races that are not.
tsan_tests=(thread_pool_test submission_outbox_test engine_test engine_next_run_test
  cross_node_run_test)

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi

# run_suite BUILD_DIR SANITIZERS TEST_TARGET...
run_suite() {
  local dir=$1 sanitizers=$2
  shift 2
  local chosen
  chosen=$(IFS=';'; echo "$*")
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCOLLECTIVE_SANITIZE="$sanitizers" \
    -DCOLLECTIVE_UNIT_TESTS="$chosen" -DCOLLECTIVE_GPU=OFF -DCOLLECTIVE_BUILD_PYTHON=OFF \
    "${launcher[@]}" >/dev/null
  cmake --build "$dir" -j "$jobs" --target unit_tests
  ctest --test-dir "$dir" --output-on-failure --timeout 600 -j "$jobs" -L unit
}

export ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
case "$which" in
  asan) run_suite build-asan address,undefined "${asan_tests[@]}" ;;
  tsan) run_suite build-tsan thread "${tsan_tests[@]}" ;;
  all)
    run_suite build-asan address,undefined "${asan_tests[@]}"
    run_suite build-tsan thread "${tsan_tests[@]}"
    ;;
  *)
    echo "usage: $0 [asan|tsan|all]" >&2
    exit 2
    ;;
esac
