// Whether bytes are well-formed UTF-8 (no overlong forms, no surrogates,
// nothing past U+10FFFF): what a text must be to reach a client as a proto3
// string or a Python str. For the fuzz targets' checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace collective::fuzz {

inline bool IsUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    size_t extra = 0;
    uint32_t point = 0;
    if (lead < 0x80) {
      ++i;
      continue;
    } else if ((lead & 0xe0) == 0xc0) {
      extra = 1;
      point = lead & 0x1f;
    } else if ((lead & 0xf0) == 0xe0) {
      extra = 2;
      point = lead & 0x0f;
    } else if ((lead & 0xf8) == 0xf0) {
      extra = 3;
      point = lead & 0x07;
    } else {
      return false;
    }
    if (i + extra >= text.size()) return false;
    for (size_t k = 1; k <= extra; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xc0) != 0x80) return false;
      point = (point << 6) | (next & 0x3f);
    }
    constexpr uint32_t kSmallest[] = {0, 0x80, 0x800, 0x10000};
    if (point < kSmallest[extra] || point > 0x10ffff || (point >= 0xd800 && point <= 0xdfff)) {
      return false;
    }
    i += extra + 1;
  }
  return true;
}

}  // namespace collective::fuzz
