#!/usr/bin/env bash
# The embedded default, for real: a private collectived on a socket of its own
# and four trainer processes on this machine that average ResNet-50's
# gradients through it, step after step, and check every result.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/bin
ranks=${DEMO_RANKS:-4}
steps=${DEMO_STEPS:-10}
workload=tests/bench/workloads/resnet50_gradients.txt

dir=$(mktemp -d /tmp/collectived-demo.XXXXXX)
socket=$dir/collectived.sock
daemon=
cleanup() {
  if [ -n "$daemon" ] && kill -0 "$daemon" 2>/dev/null; then kill -TERM "$daemon"; wait "$daemon" || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT

"$bin/collectived" --socket "$socket" --log-level warn 2>"$dir/collectived.log" &
daemon=$!
"$bin/collectivectl" --socket "$socket" --timeout 20 health --wait >/dev/null
echo "demo: collectived (pid $daemon) serves $socket"
echo "demo: starting $ranks trainers (LOCAL_RANK=0..$((ranks - 1)), LOCAL_SIZE=$ranks), $steps steps each"

pids=()
for ((rank = 0; rank < ranks; rank++)); do
  COLLECTIVE_SOCKET=$socket LOCAL_RANK=$rank LOCAL_SIZE=$ranks \
    "$bin/demo-trainer" "$workload" "$steps" >"$dir/rank$rank.log" 2>&1 &
  pids+=($!)
done
failed=0
for ((rank = 0; rank < ranks; rank++)); do
  if ! wait "${pids[$rank]}"; then
    echo "demo: rank $rank failed:" >&2
    cat "$dir/rank$rank.log" >&2
    failed=1
  fi
done
if [ "$failed" -ne 0 ]; then
  echo "demo: daemon log:" >&2
  cat "$dir/collectived.log" >&2
  exit 1
fi
cat "$dir/rank0.log"
for ((rank = 1; rank < ranks; rank++)); do grep "checked" "$dir/rank$rank.log"; done

echo
"$bin/collectivectl" --socket "$socket" status
kill -TERM "$daemon"
status=0
wait "$daemon" || status=$?
daemon=
if [ "$status" -ne 0 ]; then
  echo "demo: collectived exited with status $status" >&2
  cat "$dir/collectived.log" >&2
  exit 1
fi
echo
echo "demo: collectived stopped cleanly (socket and shared memory removed)"
