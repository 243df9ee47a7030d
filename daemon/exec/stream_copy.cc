#include "daemon/exec/stream_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace collective::daemon::exec {

#if defined(__x86_64__)

void StreamCopy(void* destination, const void* source, size_t bytes) {
  auto* to = static_cast<std::byte*>(destination);
  const auto* from = static_cast<const std::byte*>(source);
  // Up to the destination's first 16-byte boundary with an ordinary copy.
  const size_t head = std::min(bytes, (16 - reinterpret_cast<uintptr_t>(to) % 16) % 16);
  std::memcpy(to, from, head);
  to += head;
  from += head;
  bytes -= head;
  // Four 16-byte stores per 64-byte line: write-combined whole lines.
  const size_t body = bytes / 64 * 64;
  for (size_t i = 0; i < body; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + i + 48), d);
  }
  std::memcpy(to + body, from + body, bytes - body);
}

void StreamFence() { _mm_sfence(); }

#else

void StreamCopy(void* destination, const void* source, size_t bytes) {
  std::memcpy(destination, source, bytes);
}

void StreamFence() {}

#endif

}  // namespace collective::daemon::exec
