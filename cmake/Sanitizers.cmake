# Instrumented builds, each in a build directory of its own (make sanitize,
# make fuzz; README "Testing"). Applied to every target of the tree, so that
# what a test links is instrumented as the test is.
#
#   COLLECTIVE_SANITIZE=address,undefined   ASan and UBSan: the unit tests
#   COLLECTIVE_SANITIZE=thread              TSan: the threaded parts' tests
#   COLLECTIVE_FUZZ=ON                      libFuzzer targets (tests/fuzz),
#                                           with ASan and UBSan; clang only
#
# Any finding ends the process with a non-zero status (no recovery), so a
# test that trips one fails.
set(COLLECTIVE_SANITIZE "" CACHE STRING
    "Sanitizers for every target: address,undefined or thread (empty: none)")
option(COLLECTIVE_FUZZ "Build the libFuzzer targets of tests/fuzz (needs clang)" OFF)

if(COLLECTIVE_SANITIZE AND COLLECTIVE_FUZZ)
  message(FATAL_ERROR "COLLECTIVE_FUZZ brings its own sanitizers; leave COLLECTIVE_SANITIZE "
                      "empty in a fuzzing build directory.")
endif()

set(COLLECTIVE_SANITIZER_FLAGS "")
if(COLLECTIVE_SANITIZE)
  if(NOT COLLECTIVE_SANITIZE MATCHES "^(address,undefined|undefined,address|address|undefined|thread)$")
    message(FATAL_ERROR "COLLECTIVE_SANITIZE is '${COLLECTIVE_SANITIZE}'; it must be "
                        "address,undefined or thread (TSan cannot be combined with ASan).")
  endif()
  set(COLLECTIVE_SANITIZER_FLAGS -fsanitize=${COLLECTIVE_SANITIZE})
  if(COLLECTIVE_SANITIZE MATCHES "undefined")
    list(APPEND COLLECTIVE_SANITIZER_FLAGS -fno-sanitize-recover=undefined)
  endif()
elseif(COLLECTIVE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "COLLECTIVE_FUZZ needs clang (libFuzzer); configure a build directory "
                        "of its own with CC=clang CXX=clang++ (make fuzz does).")
  endif()
  # Every library a target links is instrumented for coverage; the targets
  # themselves add libFuzzer's main (tests/fuzz/CMakeLists.txt).
  set(COLLECTIVE_SANITIZER_FLAGS -fsanitize=fuzzer-no-link,address,undefined
      -fno-sanitize-recover=undefined)
endif()

if(COLLECTIVE_SANITIZER_FLAGS)
  # -O1 keeps the tests quick and the reports' stacks readable.
  foreach(flag IN LISTS COLLECTIVE_SANITIZER_FLAGS ITEMS -fno-omit-frame-pointer -O1)
    add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:${flag}>)
  endforeach()
  add_link_options(${COLLECTIVE_SANITIZER_FLAGS})
  if(COLLECTIVE_SANITIZE STREQUAL "thread" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # gcc warns that TSan does not model std::atomic_thread_fence. The only
    # fences (shm/client_segment.cc, shm/result_segment.cc) order a new
    # segment's header for other processes, which TSan cannot see anyway.
    add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-Wno-tsan>)
  endif()
  message(STATUS "Instrumented build: ${COLLECTIVE_SANITIZER_FLAGS}")
endif()
