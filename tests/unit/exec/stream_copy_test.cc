// daemon/exec/stream_copy: a copy with streaming stores writes exactly the
// source's bytes at every alignment of source and destination and every
// length around the 16-byte stores and 64-byte lines, and nothing outside.
#include "daemon/exec/stream_copy.h"

#include <cstddef>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

namespace collective::daemon::exec {
namespace {

TEST(StreamCopyTest, CopiesEveryAlignmentAndLengthExactly) {
  std::vector<std::byte> source(4096 + 64);
  for (size_t i = 0; i < source.size(); ++i)
    source[i] = std::byte(static_cast<uint8_t>(i * 13 + 1));
  for (size_t from = 0; from < 17; ++from) {
    for (size_t to = 0; to < 17; ++to) {
      for (size_t bytes : {0, 1, 15, 16, 17, 63, 64, 65, 127, 200, 1000, 4096}) {
        // Guard bytes on both sides of the destination.
        std::vector<std::byte> destination(bytes + 64, std::byte{0xee});
        StreamCopy(destination.data() + to, source.data() + from, bytes);
        StreamFence();
        for (size_t i = 0; i < destination.size(); ++i) {
          const bool inside = i >= to && i < to + bytes;
          ASSERT_EQ(destination[i], inside ? source[from + i - to] : std::byte{0xee})
              << "from +" << from << ", to +" << to << ", " << bytes << " bytes, byte " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace collective::daemon::exec
