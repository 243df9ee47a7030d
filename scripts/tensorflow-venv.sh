#!/usr/bin/env bash
# Creates <build>/tf-venv: a virtual environment of /usr/bin/python3 holding
# the pinned TensorFlow of scripts/tensorflow-requirements.txt, against which
# collective.tensorflow is built and tested (TensorFlow is not in Debian).
#   tensorflow-venv.sh [build-dir]
# Idempotent and quiet: does nothing when the venv already holds exactly these
# requirements. Downloads go through pip's cache (PIP_CACHE_DIR, else
# ~/.cache/pip), which CI keeps between runs. Without network it says so once
# and exits 0: the build then leaves collective.tensorflow out and its tests
# report themselves skipped.
set -euo pipefail
build_dir=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
requirements=$here/tensorflow-requirements.txt
venv=$build_dir/tf-venv
stamp=$venv/.requirements

if [ -f "$stamp" ] && cmp -s "$stamp" "$requirements"; then
  exit 0
fi

mkdir -p "$build_dir"
rm -rf "$venv"
/usr/bin/python3 -m venv "$venv"
log=$build_dir/tf-venv.log
echo "tensorflow-venv: installing $(grep -v '^#' "$requirements" | tr '\n' ' ')into $venv" >&2
if ! "$venv/bin/python" -m pip install --disable-pip-version-check -q --retries 2 \
    -r "$requirements" >"$log" 2>&1; then
  rm -rf "$venv"
  echo "tensorflow-venv: pip could not install TensorFlow (see $log); collective.tensorflow will not be built and its tests will be skipped." >&2
  exit 0
fi
cp "$requirements" "$stamp"
