# Every third-party dependency is found here, once. All come from Debian 12
# packages (scripts/install-deps.sh); CUDA and NCCL are optional.
find_package(Threads REQUIRED)
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(Boost 1.74 REQUIRED)
find_package(spdlog CONFIG REQUIRED)
find_package(fmt CONFIG REQUIRED)
find_package(yaml-cpp CONFIG REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(MPI REQUIRED COMPONENTS C)
find_package(PkgConfig REQUIRED)
pkg_check_modules(SYSTEMD REQUIRED IMPORTED_TARGET libsystemd)

find_program(GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)

# The GPU path is built only where CUDA and NCCL are present.
find_package(CUDAToolkit QUIET)
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
if(CUDAToolkit_FOUND AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
  set(COLLECTIVE_HAVE_CUDA 1)
  message(STATUS "GPU path: CUDA ${CUDAToolkit_VERSION}, NCCL ${NCCL_LIBRARY}")
else()
  set(COLLECTIVE_HAVE_CUDA 0)
  message(STATUS "GPU path: off (CUDA toolkit or NCCL not found)")
endif()

if(COLLECTIVE_BUILD_TESTS)
  find_package(GTest REQUIRED)
  find_package(benchmark CONFIG REQUIRED)
endif()
