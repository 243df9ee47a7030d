#!/bin/sh
# Packs what the GPU tests and the GPU benchmark need into one relocatable
# directory, for a machine that has an NVIDIA GPU but no package registry
# (the GPU path's proof runs there; see README "GPU tensors"). It holds the
# daemon, collectivectl, collective-bench, the GPU tests and their worker,
# stripped, and every shared library they load but the C library's own
# (the machine's, which must be as new as Debian 12's) and the CUDA driver
# and NCCL (the machine's: NCCL comes with its Python environment's nvidia
# packages, or its CUDA installation).
#
#   scripts/gpu-bundle.sh [BUILD_DIR] [OUT_DIR]     # defaults: build gpu-bundle
#
# Then, on the GPU machine, from the repository's root (collective-bench reads
# tests/bench/workloads/ from there):
#   gpu-bundle/run.sh tests                         # ctest -L gpu, without ctest
#   gpu-bundle/run.sh bench [collective-bench args] # --device cuda
set -eu

build=${1:-build}
out=${2:-gpu-bundle}

if [ ! -x "$build/tests/gpu_collectives_test" ]; then
  echo "gpu-bundle: $build has no GPU build (CMake found no CUDA toolkit or NCCL, or COLLECTIVE_GPU=OFF)" >&2
  exit 1
fi

binaries="$build/bin/collectived $build/bin/collectivectl $build/bin/collective-bench
$build/tests/gpu_collectives_test $build/tests/device_reduce_gpu_test
$build/tests/collective-gpu-worker"

# Left out: the C library's own, the CUDA driver and NCCL (the machine's).
excluded="libc.so. libm.so. libpthread.so. libdl.so. librt.so. libresolv.so. ld-linux libcuda.so.
libnccl.so."
is_excluded() {
  for prefix in $excluded; do
    case $1 in "$prefix"*) return 0 ;; esac
  done
  return 1
}

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for binary in $binaries; do
  cp "$binary" "$out/bin/"
done

# Every library the binaries load, as the loader here resolves it.
for binary in $binaries; do
  ldd "$binary"
done | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u | while read -r library; do
  is_excluded "$(basename "$library")" || cp -L "$library" "$out/lib/"
done
strip --strip-debug "$out"/bin/* "$out"/lib/*

# Self-check: with the bundle's lib/ first, nothing but the excluded
# libraries resolves outside it.
outside=$(for binary in "$out"/bin/*; do LD_LIBRARY_PATH="$out/lib" ldd "$binary"; done |
  awk -v lib="$(cd "$out/lib" && pwd)" '$2 == "=>" && $3 ~ /^\// && index($3, lib) != 1 { print $1 }' |
  sort -u | while read -r name; do is_excluded "$name" || echo "$name"; done)
if [ -n "$outside" ]; then
  echo "gpu-bundle: these still load from outside $out/lib: $outside" >&2
  exit 1
fi

cat >"$out/run.sh" <<'EOF'
#!/bin/sh
# The GPU tests or the GPU benchmark from this bundle (scripts/gpu-bundle.sh).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
# NCCL: the Python environment's nvidia-nccl package, else the CUDA
# installation's.
nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' \
  2>/dev/null || true)
for candidate in "$nccl" /usr/local/cuda/lib64 /usr/local/cuda/lib; do
  if [ -n "$candidate" ] && [ -e "$candidate/libnccl.so.2" ]; then
    nccl=$candidate
    break
  fi
done
export LD_LIBRARY_PATH="$here/lib:$nccl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export COLLECTIVE_BUNDLE_DIR="$here"
case ${1:-tests} in
  tests)
    "$here/bin/device_reduce_gpu_test"
    "$here/bin/gpu_collectives_test" ;;
  bench)
    shift
    "$here/bin/collective-bench" --device cuda "$@" ;;
  *)
    echo "usage: $0 tests | bench [collective-bench arguments]" >&2
    exit 2 ;;
esac
EOF
chmod +x "$out/run.sh"
echo "gpu-bundle: $out ($(du -sh "$out" | cut -f1)): $out/run.sh tests | bench"
