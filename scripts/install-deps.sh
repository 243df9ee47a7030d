#!/usr/bin/env bash
# Installs the Debian 12 packages collectived needs to build, test and run.
# Idempotent and quiet: prints nothing and touches nothing when all are present.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git
  # control plane
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libabsl-dev
  # multi-node
  libopenmpi-dev openmpi-bin
  # shared memory, logging, config, CLI, systemd
  libboost-dev libspdlog-dev libfmt-dev libyaml-cpp-dev libcli11-dev libsystemd-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # Python binding and its tests
  pybind11-dev python3-dev python3-torch python3-pytest python3-numpy
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
