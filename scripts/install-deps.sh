#!/usr/bin/env bash
# Installs the Debian 12 packages collectived needs. Idempotent and quiet:
# prints nothing and touches nothing when all are present.
#   install-deps.sh          build, test and run (make test, make demo, CI)
#   install-deps.sh build    only what compiling the daemon and its tools needs
#                            (cmake -DCOLLECTIVE_BUILD_TESTS=OFF
#                            -DCOLLECTIVE_BUILD_PYTHON=OFF; the container
#                            image's build stage)
set -euo pipefail
profile=${1:-all}

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config
  # control plane
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libabsl-dev
  # multi-node: MPI worlds (mpirun, srun) and Gloo job worlds among resident daemons
  libopenmpi-dev openmpi-bin libgloo-dev
  # shared memory, logging, config, CLI
  libboost-dev libspdlog-dev libfmt-dev libyaml-cpp-dev libcli11-dev
)
case "$profile" in
  build) ;;
  all)
    packages+=(
      git
      # tests and benchmarks
      libgtest-dev libgmock-dev libbenchmark-dev
      # Python binding and its tests
      pybind11-dev python3-dev python3-torch python3-pytest python3-numpy
      # broadcast_object/allgather_object serialize with cloudpickle, as Horovod does
      python3-cloudpickle
      # tests/bench/python_paths_bench.py: a real ResNet-50 under DistributedOptimizer
      python3-torchvision
      # collective.tensorflow: the venv scripts/tensorflow-venv.sh makes
      python3-venv
      # the deployment tests: systemd-analyze verify, systemd-sysusers
      systemd
      # machines_test: collectiverun across machines, which mpirun reaches
      # over ssh (the test runs an sshd of its own on a loopback port)
      openssh-client openssh-server
      # make fuzz: clang and libFuzzer's runtime (gcc's own sanitizer
      # runtimes, for make sanitize, come with build-essential); ccache
      # keeps the instrumented rebuilds short
      clang libclang-rt-14-dev ccache
    )
    ;;
  *)
    echo "usage: $0 [all|build]" >&2
    exit 2
    ;;
esac

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
