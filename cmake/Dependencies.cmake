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
# Job worlds among resident daemons (Debian's libgloo-dev: TCP, ibverbs).
find_package(Gloo CONFIG REQUIRED)

find_program(GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)

# The GPU path is built only where CUDA (toolkit and nvcc) and NCCL are
# present, and COLLECTIVE_GPU is on; nothing else depends on it.
set(COLLECTIVE_HAVE_CUDA 0)
if(COLLECTIVE_GPU)
  find_package(CUDAToolkit QUIET)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
  include(CheckLanguage)
  check_language(CUDA)
  if(CUDAToolkit_FOUND AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY AND CMAKE_CUDA_COMPILER)
    set(COLLECTIVE_HAVE_CUDA 1)
  endif()
endif()
# The NCCL_VERSION_CODE of the nccl.h the GPU path is built with (0 without
# it): collective.torch's nccl_built() returns it, as Horovod's does
# (client/python/CMakeLists.txt).
set(COLLECTIVE_NCCL_VERSION_CODE 0)
if(COLLECTIVE_HAVE_CUDA)
  file(STRINGS ${NCCL_INCLUDE_DIR}/nccl.h nccl_version_line
       REGEX "^#define NCCL_VERSION_CODE +[0-9]+")
  string(REGEX MATCH "NCCL_VERSION_CODE +([0-9]+)" nccl_version_line "${nccl_version_line}")
  set(COLLECTIVE_NCCL_VERSION_CODE "${CMAKE_MATCH_1}")
  if(NOT COLLECTIVE_NCCL_VERSION_CODE)
    message(FATAL_ERROR "No NCCL_VERSION_CODE in ${NCCL_INCLUDE_DIR}/nccl.h")
  endif()
  # Ampere and Hopper, as SASS, plus PTX for later GPUs: not every
  # architecture, which would multiply nvcc's time.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80-real 90)
  endif()
  enable_language(CUDA)
  # CMake 3.25 does not know nvcc's C++20 flag (nvcc has had it since 12.0).
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  add_library(collective_nccl INTERFACE)
  target_include_directories(collective_nccl SYSTEM INTERFACE ${NCCL_INCLUDE_DIR})
  target_link_libraries(collective_nccl INTERFACE ${NCCL_LIBRARY})
  message(STATUS "GPU path: CUDA ${CUDAToolkit_VERSION}, NCCL ${NCCL_LIBRARY}, "
                 "architectures ${CMAKE_CUDA_ARCHITECTURES}")
elseif(COLLECTIVE_GPU)
  message(STATUS "GPU path: off (CUDA toolkit, nvcc or NCCL not found)")
else()
  message(STATUS "GPU path: off (COLLECTIVE_GPU=OFF)")
endif()

if(COLLECTIVE_BUILD_TESTS)
  find_package(GTest REQUIRED)
  find_package(benchmark CONFIG REQUIRED)
endif()
