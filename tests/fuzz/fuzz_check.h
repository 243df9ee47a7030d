// What a fuzz target does when the code under test breaks a promise its
// header makes (as opposed to a crash or a sanitizer report, which libFuzzer
// catches on its own): say which promise, and abort, so that libFuzzer keeps
// the input as a crash.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace collective::fuzz {

[[noreturn]] inline void Broken(const char* promise) {
  std::fprintf(stderr, "fuzz target: broken promise: %s\n", promise);
  std::abort();
}

inline void Require(bool holds, const char* promise) {
  if (!holds) Broken(promise);
}

}  // namespace collective::fuzz
