// Loads and stores of one element of a buffer at any address: memcpy keeps
// unaligned buffers (arbitrary arena offsets) legal. Used by the kernels;
// pure functions, any thread.
#pragma once

#include <cstddef>
#include <cstring>

namespace collective::daemon::exec {

template <typename T>
T LoadRaw(const void* base, size_t i) {
  T value;
  std::memcpy(&value, static_cast<const char*>(base) + i * sizeof(T), sizeof(T));
  return value;
}

template <typename T>
void StoreRaw(void* base, size_t i, T value) {
  std::memcpy(static_cast<char*>(base) + i * sizeof(T), &value, sizeof(T));
}

}  // namespace collective::daemon::exec
