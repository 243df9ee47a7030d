#!/bin/sh
# Packs what the GPU tests and the GPU benchmark need into one relocatable
# directory, for a machine that has an NVIDIA GPU but no package registry
# (the GPU path's proof runs there; see README "GPU tensors"). It holds the
# daemon, collectivectl, collectiverun, collective-bench, the GPU tests and
# their worker, stripped, and every shared library they load but the C
# library's own
# (the machine's, which must be as new as Debian 12's) and the CUDA driver
# and NCCL (the machine's: NCCL comes with its Python environment's nvidia
# packages, or its CUDA installation). For collective.torch it holds the
# package's Python sources and the sources and headers of its extension,
# which `run.sh python` compiles there, once, against that machine's own
# Python and pybind11 (the extension never links libtorch).
#
#   scripts/gpu-bundle.sh [BUILD_DIR] [OUT_DIR]     # defaults: build gpu-bundle
#
# Then, on the GPU machine, from the repository's root (collective-bench reads
# tests/bench/workloads/ from there):
#   gpu-bundle/run.sh tests                         # ctest -L gpu, without ctest
#   gpu-bundle/run.sh bench [collective-bench args] # --device cuda
#   gpu-bundle/run.sh python -np 2 python3 -m pytest tests/python/test_torch_cuda.py
#                                                   # collectiverun, collective.torch importable
set -eu

build=${1:-build}
out=${2:-gpu-bundle}
source_dir=$(cd "$(dirname "$0")/.." && pwd)

if [ ! -x "$build/tests/gpu_collectives_test" ]; then
  echo "gpu-bundle: $build has no GPU build (CMake found no CUDA toolkit or NCCL, or COLLECTIVE_GPU=OFF)" >&2
  exit 1
fi

binaries="$build/bin/collectived $build/bin/collectivectl $build/bin/collectiverun
$build/bin/collective-bench
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

# collective.torch: the Python sources as the build tree has them, and what
# its extension compiles from (its sources, libcollective's public headers,
# and the headers of the Abseil whose libraries are in lib/).
absl_include=$(for dir in /usr/include /usr/local/include; do
  [ -d "$dir/absl" ] && echo "$dir" && break
done || true)
if [ -d "$build/python/collective" ] && [ -n "$absl_include" ]; then
  mkdir -p "$out/python/src" "$out/python/include"
  cp -r "$build/python/collective" "$out/python/"
  find "$out/python/collective" -name '*.so' -delete
  find "$out/python/collective" -name __pycache__ -prune -exec rm -rf {} +
  cp "$source_dir"/client/python/src/*.cc "$source_dir"/client/python/src/*.h "$out/python/src/"
  cp -r "$source_dir/client/include/collective" "$absl_include/absl" "$out/python/include/"
  sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt" >"$out/python/VERSION"
else
  echo "gpu-bundle: no collective.torch in the bundle ($build/python or Abseil's headers missing)" >&2
fi

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
bundle_path="$here/lib:$nccl"
export COLLECTIVE_BUNDLE_DIR="$here"
case ${1:-tests} in
  python)
    # The machine's own Python and torch: libraries it has itself (a newer
    # libstdc++, say) come first, so that torch loads what it was built
    # against; the bundle supplies the rest.
    shift
    python=${PYTHON:-python3}
    package="$here/python"
    core="$package/collective/_core$("$python" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
    if [ ! -e "$core" ]; then
      echo "run.sh: compiling collective._core for $("$python" --version 2>&1)" >&2
      # pybind11's pip package says where its headers and Python's are;
      # without it, Python's headers and pybind11's on the default path.
      includes=$("$python" -m pybind11 --includes 2>/dev/null ||
        "$python" -c 'import sysconfig; print("-I" + sysconfig.get_paths()["include"])')
      objects=$(mktemp -d)
      for file in "$package"/src/*.cc; do  # one compiler per source, at once
        # shellcheck disable=SC2086 # $includes is a list of flags
        ${CXX:-c++} -O2 -std=c++17 -fPIC -fvisibility=hidden $includes -I"$package/include" \
          -DCOLLECTIVE_PYTHON_VERSION="\"$(cat "$package/VERSION")\"" \
          -c "$file" -o "$objects/$(basename "$file").o" &
        pids="${pids:-} $!"
      done
      failed=0
      for pid in $pids; do wait "$pid" || failed=1; done
      [ "$failed" = 0 ] || { echo "run.sh: collective._core did not compile" >&2; exit 1; }
      ${CXX:-c++} -shared "$objects"/*.o -o "$core.tmp" \
        "$here/lib/libcollective.so.0" "$here"/lib/libabsl_*.so.* -Wl,-rpath,"$here/lib"
      rm -rf "$objects"
      mv "$core.tmp" "$core"
    fi
    system_lib=$("$python" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR") or "")')
    export LD_LIBRARY_PATH="/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu:$system_lib:$bundle_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export PYTHONPATH="$package${PYTHONPATH:+:$PYTHONPATH}"
    "$here/bin/collectiverun" "$@" ;;
  tests)
    export LD_LIBRARY_PATH="$bundle_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    "$here/bin/device_reduce_gpu_test"
    "$here/bin/gpu_collectives_test" ;;
  bench)
    shift
    export LD_LIBRARY_PATH="$bundle_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    "$here/bin/collective-bench" --device cuda "$@" ;;
  *)
    echo "usage: $0 tests | bench [collective-bench arguments] | python [collectiverun arguments]" >&2
    exit 2 ;;
esac
EOF
chmod +x "$out/run.sh"
echo "gpu-bundle: $out ($(du -sh "$out" | cut -f1)): $out/run.sh tests | bench"
