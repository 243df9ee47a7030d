// libFuzzer's entry point, shared by the targets of this folder: each
// defines FuzzOne (fuzz_input.h).
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  collective::fuzz::FuzzInput input(data, size);
  collective::fuzz::FuzzOne(input);
  return 0;
}
