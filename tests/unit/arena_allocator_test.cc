// shm/arena_allocator: best-fit allocation by offset, alignment, coalescing,
// refusals, and a randomized check against a plain reference model.
#include "shm/arena_allocator.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace collective::shm {
namespace {

constexpr uint64_t kUnit = 64;

TEST(ArenaAllocatorTest, CapacityIsRoundedDownToTheAlignment) {
  ArenaAllocator allocator(1000, kUnit);
  EXPECT_EQ(allocator.capacity(), 960u);
  EXPECT_EQ(allocator.largest_free_block(), 960u);
  EXPECT_EQ(allocator.bytes_in_use(), 0u);
  EXPECT_EQ(allocator.blocks_in_use(), 0u);
}

TEST(ArenaAllocatorTest, BlocksAreAlignedAndRoundedUp) {
  ArenaAllocator allocator(64 * kUnit, kUnit);
  const auto a = allocator.Allocate(1);
  const auto b = allocator.Allocate(65);
  const auto c = allocator.Allocate(128);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(*a, 0u);
  EXPECT_EQ(*b, 64u);
  EXPECT_EQ(*c, 192u);
  for (uint64_t offset : {*a, *b, *c}) EXPECT_EQ(offset % kUnit, 0u);
  EXPECT_EQ(allocator.BlockBytes(*a), 64u);
  EXPECT_EQ(allocator.BlockBytes(*b), 128u);
  EXPECT_EQ(allocator.BlockBytes(*c), 128u);
  EXPECT_EQ(allocator.bytes_in_use(), 320u);
  EXPECT_EQ(allocator.blocks_in_use(), 3u);
  EXPECT_EQ(allocator.BlockBytes(*a + 64 + 1), 0u) << "not the start of a block";
}

TEST(ArenaAllocatorTest, ZeroBytesGetsADistinctFreeableBlock) {
  ArenaAllocator allocator(4 * kUnit, kUnit);
  const auto a = allocator.Allocate(0);
  const auto b = allocator.Allocate(0);
  ASSERT_TRUE(a && b);
  EXPECT_NE(*a, *b);
  EXPECT_EQ(allocator.BlockBytes(*a), kUnit);
  EXPECT_TRUE(allocator.Free(*a));
  EXPECT_TRUE(allocator.Free(*b));
  EXPECT_EQ(allocator.bytes_in_use(), 0u);
}

TEST(ArenaAllocatorTest, RefusesWhatDoesNotFit) {
  ArenaAllocator allocator(4 * kUnit, kUnit);
  EXPECT_FALSE(allocator.Allocate(4 * kUnit + 1).has_value());
  EXPECT_FALSE(allocator.Allocate(std::numeric_limits<uint64_t>::max()).has_value());
  EXPECT_FALSE(allocator.Allocate(std::numeric_limits<uint64_t>::max() - kUnit + 2).has_value());
  const auto all = allocator.Allocate(4 * kUnit);
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(allocator.largest_free_block(), 0u);
  EXPECT_FALSE(allocator.Allocate(0).has_value());
  EXPECT_FALSE(allocator.Allocate(1).has_value());
}

TEST(ArenaAllocatorTest, ZeroCapacityAllocatesNothing) {
  ArenaAllocator allocator(kUnit - 1, kUnit);
  EXPECT_EQ(allocator.capacity(), 0u);
  EXPECT_FALSE(allocator.Allocate(0).has_value());
  EXPECT_FALSE(allocator.Allocate(1).has_value());
}

TEST(ArenaAllocatorTest, DoubleFreeAndForeignOffsetsChangeNothing) {
  ArenaAllocator allocator(8 * kUnit, kUnit);
  const auto a = allocator.Allocate(2 * kUnit);
  const auto b = allocator.Allocate(kUnit);
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(allocator.Free(*a + kUnit)) << "inside a block";
  EXPECT_FALSE(allocator.Free(7 * kUnit)) << "free space";
  EXPECT_FALSE(allocator.Free(1 << 20)) << "outside the arena";
  EXPECT_EQ(allocator.bytes_in_use(), 3 * kUnit);
  EXPECT_TRUE(allocator.Free(*a));
  EXPECT_FALSE(allocator.Free(*a)) << "double free";
  EXPECT_EQ(allocator.bytes_in_use(), kUnit);
  EXPECT_EQ(allocator.blocks_in_use(), 1u);
  EXPECT_EQ(allocator.largest_free_block(), 5 * kUnit);
}

TEST(ArenaAllocatorTest, FreeCoalescesWithBothNeighbours) {
  ArenaAllocator allocator(6 * kUnit, kUnit);
  std::vector<uint64_t> blocks;
  for (int i = 0; i < 6; ++i) blocks.push_back(*allocator.Allocate(kUnit));
  // Free 1 and 3, then 2 between them: one run of three.
  ASSERT_TRUE(allocator.Free(blocks[1]));
  ASSERT_TRUE(allocator.Free(blocks[3]));
  EXPECT_EQ(allocator.largest_free_block(), kUnit);
  ASSERT_TRUE(allocator.Free(blocks[2]));
  EXPECT_EQ(allocator.largest_free_block(), 3 * kUnit);
  // With its previous neighbour only, then its next only.
  ASSERT_TRUE(allocator.Free(blocks[4]));
  EXPECT_EQ(allocator.largest_free_block(), 4 * kUnit);
  ASSERT_TRUE(allocator.Free(blocks[0]));
  EXPECT_EQ(allocator.largest_free_block(), 5 * kUnit);
  ASSERT_TRUE(allocator.Free(blocks[5]));
  EXPECT_EQ(allocator.largest_free_block(), 6 * kUnit);
  // Whole again: the full capacity is one block.
  EXPECT_EQ(allocator.Allocate(6 * kUnit), 0u);
}

TEST(ArenaAllocatorTest, ChoosesTheBestFitNotTheFirstFit) {
  // Holes of 3, 1 and 2 units, in that order, separated by used blocks.
  ArenaAllocator allocator(12 * kUnit, kUnit);
  const uint64_t hole3 = *allocator.Allocate(3 * kUnit);
  allocator.Allocate(kUnit);
  const uint64_t hole1 = *allocator.Allocate(kUnit);
  allocator.Allocate(kUnit);
  const uint64_t hole2 = *allocator.Allocate(2 * kUnit);
  allocator.Allocate(4 * kUnit);  // the rest
  ASSERT_EQ(allocator.largest_free_block(), 0u);
  allocator.Free(hole3);
  allocator.Free(hole1);
  allocator.Free(hole2);
  EXPECT_EQ(allocator.Allocate(2 * kUnit), hole2);
  EXPECT_EQ(allocator.Allocate(kUnit), hole1);
  EXPECT_EQ(allocator.Allocate(kUnit), hole3) << "what is left of the 3-unit hole";
  EXPECT_EQ(allocator.Allocate(2 * kUnit), hole3 + kUnit);
}

TEST(ArenaAllocatorTest, EqualFitsGoToTheLowestOffset) {
  ArenaAllocator allocator(5 * kUnit, kUnit);
  std::vector<uint64_t> blocks;
  for (int i = 0; i < 5; ++i) blocks.push_back(*allocator.Allocate(kUnit));
  allocator.Free(blocks[3]);
  allocator.Free(blocks[1]);
  EXPECT_EQ(allocator.Allocate(kUnit), blocks[1]);
  EXPECT_EQ(allocator.Allocate(kUnit), blocks[3]);
}

TEST(ArenaAllocatorTest, FragmentationRefusesWhatTheTotalWouldHold) {
  ArenaAllocator allocator(16 * kUnit, kUnit);
  std::vector<uint64_t> blocks;
  for (int i = 0; i < 16; ++i) blocks.push_back(*allocator.Allocate(kUnit));
  for (int i = 0; i < 16; i += 2) allocator.Free(blocks[i]);
  EXPECT_EQ(allocator.bytes_in_use(), 8 * kUnit);
  EXPECT_EQ(allocator.largest_free_block(), kUnit);
  EXPECT_FALSE(allocator.Allocate(2 * kUnit).has_value());
  // Freeing one used block joins three holes.
  allocator.Free(blocks[5]);
  EXPECT_EQ(allocator.largest_free_block(), 3 * kUnit);
  EXPECT_EQ(allocator.Allocate(2 * kUnit), blocks[4]);
}

// The reference: free ranges in a sorted map, searched linearly for the
// smallest range that fits (lowest offset among equals).
class ReferenceAllocator {
 public:
  ReferenceAllocator(uint64_t capacity, uint64_t alignment)
      : capacity_(capacity / alignment * alignment), alignment_(alignment) {
    if (capacity_ > 0) free_[0] = capacity_;
  }

  std::optional<uint64_t> Allocate(uint64_t bytes) {
    if (bytes > capacity_) return std::nullopt;
    const uint64_t size =
        bytes == 0 ? alignment_ : (bytes + alignment_ - 1) / alignment_ * alignment_;
    std::optional<std::pair<uint64_t, uint64_t>> best;  // (bytes, offset)
    for (const auto& [offset, length] : free_) {
      if (length >= size && (!best || std::make_pair(length, offset) < *best)) {
        best = std::make_pair(length, offset);
      }
    }
    if (!best) return std::nullopt;
    const auto [length, offset] = *best;
    free_.erase(offset);
    if (length > size) free_[offset + size] = length - size;
    used_[offset] = size;
    return offset;
  }

  bool Free(uint64_t offset) {
    auto it = used_.find(offset);
    if (it == used_.end()) return false;
    free_[offset] = it->second;
    used_.erase(it);
    // Merge every adjacent pair.
    for (auto current = free_.begin(); current != free_.end();) {
      auto next = std::next(current);
      if (next != free_.end() && current->first + current->second == next->first) {
        current->second += next->second;
        free_.erase(next);
      } else {
        current = next;
      }
    }
    return true;
  }

  uint64_t bytes_in_use() const {
    uint64_t total = 0;
    for (const auto& [offset, length] : used_) total += length;
    return total;
  }
  uint64_t largest_free_block() const {
    uint64_t largest = 0;
    for (const auto& [offset, length] : free_) largest = std::max(largest, length);
    return largest;
  }
  const std::map<uint64_t, uint64_t>& used() const { return used_; }

 private:
  uint64_t capacity_;
  uint64_t alignment_;
  std::map<uint64_t, uint64_t> free_;
  std::map<uint64_t, uint64_t> used_;
};

TEST(ArenaAllocatorTest, MatchesTheReferenceModelOnRandomOperations) {
  for (uint64_t alignment : {uint64_t{1}, uint64_t{64}, uint64_t{4096}}) {
    SCOPED_TRACE(alignment);
    const uint64_t capacity = 200 * alignment + alignment / 2;
    ArenaAllocator allocator(capacity, alignment);
    ReferenceAllocator reference(capacity, alignment);
    std::mt19937_64 random(alignment);
    std::vector<uint64_t> live;
    for (int step = 0; step < 20000; ++step) {
      const uint64_t choice = random() % 100;
      if (choice < 55 || live.empty()) {
        // Mostly small, sometimes large, sometimes zero or oversized.
        const uint64_t bytes = choice < 5    ? 0
                               : choice < 10 ? random() % (capacity + 2 * alignment)
                                             : random() % (8 * alignment) + 1;
        const auto got = allocator.Allocate(bytes);
        const auto expected = reference.Allocate(bytes);
        ASSERT_EQ(got, expected) << "step " << step << ": Allocate(" << bytes << ")";
        if (got) {
          ASSERT_EQ(*got % alignment, 0u);
          live.push_back(*got);
        }
      } else if (choice < 95) {
        const size_t index = random() % live.size();
        ASSERT_TRUE(allocator.Free(live[index])) << "step " << step;
        ASSERT_TRUE(reference.Free(live[index]));
        live[index] = live.back();
        live.pop_back();
      } else {
        // A foreign or stale offset.
        const uint64_t offset = random() % (capacity + alignment);
        ASSERT_EQ(allocator.Free(offset), reference.Free(offset)) << "step " << step;
        std::erase(live, offset);
      }
      ASSERT_EQ(allocator.bytes_in_use(), reference.bytes_in_use()) << "step " << step;
      ASSERT_EQ(allocator.largest_free_block(), reference.largest_free_block()) << "step " << step;
      ASSERT_EQ(allocator.blocks_in_use(), reference.used().size()) << "step " << step;
    }
    // Blocks never overlap and lie inside the capacity.
    uint64_t end = 0;
    for (const auto& [offset, length] : reference.used()) {
      EXPECT_GE(offset, end);
      EXPECT_EQ(allocator.BlockBytes(offset), length);
      end = offset + length;
    }
    EXPECT_LE(end, allocator.capacity());
  }
}

}  // namespace
}  // namespace collective::shm
