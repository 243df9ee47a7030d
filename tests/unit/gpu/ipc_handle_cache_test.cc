// daemon/gpu/ipc_handle_cache: one mapping per handle's bytes, however many
// references; closed with the last one; nothing held after a failed open.
#include "daemon/gpu/ipc_handle_cache.h"

#include <map>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace collective::daemon::gpu {
namespace {

using ::testing::HasSubstr;

// Counts opens and closes per handle; each open maps fresh "memory".
class CountingOpener final : public IpcMemoryOpener {
 public:
  absl::StatusOr<Mapping> OpenMemory(int device, absl::string_view handle) override {
    if (!fail_.ok()) return std::exchange(fail_, absl::OkStatus());
    ++opens[std::string(handle)];
    devices[std::string(handle)] = device;
    return Mapping{reinterpret_cast<std::byte*>(uintptr_t{0x1000} * ++next_), 4096};
  }
  absl::Status CloseMemory(int, std::byte* base) override {
    ++closes;
    closed.push_back(base);
    return absl::OkStatus();
  }
  void FailNextOpen(absl::Status status) { fail_ = std::move(status); }

  std::map<std::string, int> opens;
  std::map<std::string, int> devices;
  int closes = 0;
  std::vector<std::byte*> closed;

 private:
  absl::Status fail_;
  uintptr_t next_ = 0;
};

std::string HandleBytes(char fill) { return std::string(kIpcHandleBytes, fill); }

TEST(IpcHandleCacheTest, OpensEachHandleOnceAndClosesItWithTheLastReference) {
  CountingOpener opener;
  {
    IpcHandleCache cache(opener);
    const std::string a = HandleBytes('a');
    const auto first = cache.Acquire(0, a);
    ASSERT_TRUE(first.ok()) << first.status();
    const auto second = cache.Acquire(0, a);
    ASSERT_TRUE(second.ok());
    EXPECT_EQ(first->base, second->base) << "the same mapping serves every reference";
    EXPECT_EQ(opener.opens[a], 1);
    EXPECT_EQ(cache.references(a), 2u);

    cache.Retain(a);  // an in-flight batch
    cache.Release(a);
    cache.Release(a);
    EXPECT_EQ(opener.closes, 0) << "the batch still holds it";
    EXPECT_EQ(cache.open_mappings(), 1u);
    cache.Release(a);
    EXPECT_EQ(opener.closes, 1);
    EXPECT_EQ(cache.open_mappings(), 0u);
    EXPECT_EQ(cache.references(a), 0u);

    // Open again after it closed: a fresh mapping.
    ASSERT_TRUE(cache.Acquire(0, a).ok());
    EXPECT_EQ(opener.opens[a], 2);
  }
  EXPECT_EQ(opener.closes, 2) << "the cache closes what is left when it goes";
}

TEST(IpcHandleCacheTest, KeysByTheHandlesBytes) {
  CountingOpener opener;
  IpcHandleCache cache(opener);
  std::string a = HandleBytes('x');
  std::string b = a;
  b[kIpcHandleBytes - 1] = 'y';  // one byte differs
  ASSERT_TRUE(cache.Acquire(0, a).ok());
  ASSERT_TRUE(cache.Acquire(0, b).ok());
  EXPECT_EQ(cache.open_mappings(), 2u);
  EXPECT_EQ(opener.opens[a], 1);
  EXPECT_EQ(opener.opens[b], 1);
  cache.Release(b);
  EXPECT_EQ(opener.closes, 1);
  EXPECT_EQ(cache.references(a), 1u);
}

TEST(IpcHandleCacheTest, AFailedOpenHoldsNothing) {
  CountingOpener opener;
  IpcHandleCache cache(opener);
  opener.FailNextOpen(absl::UnavailableError("cudaIpcOpenMemHandle: invalid argument"));
  const auto failed = cache.Acquire(1, HandleBytes('f'));
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.status().message(), HasSubstr("cudaIpcOpenMemHandle"));
  EXPECT_EQ(cache.open_mappings(), 0u);
  EXPECT_EQ(cache.references(HandleBytes('f')), 0u);
  ASSERT_TRUE(cache.Acquire(1, HandleBytes('f')).ok()) << "a later attempt opens it";
  EXPECT_EQ(opener.devices[HandleBytes('f')], 1);
}

TEST(IpcHandleCacheTest, RefusesMalformedHandlesAndAnotherDevice) {
  CountingOpener opener;
  IpcHandleCache cache(opener);
  const auto short_handle = cache.Acquire(0, "too short");
  ASSERT_FALSE(short_handle.ok());
  EXPECT_THAT(short_handle.status().message(), HasSubstr("64 bytes, not 9"));
  ASSERT_TRUE(cache.Acquire(0, HandleBytes('d')).ok());
  const auto other = cache.Acquire(1, HandleBytes('d'));
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(other.status().message(), HasSubstr("on CUDA device 0 already"));
  EXPECT_EQ(cache.references(HandleBytes('d')), 1u);
  EXPECT_TRUE(opener.opens.size() == 1);
}

TEST(IpcHandleCacheTest, ReleasingWhatIsNotOpenDoesNothing) {
  CountingOpener opener;
  IpcHandleCache cache(opener);
  cache.Release(HandleBytes('n'));
  cache.Retain(HandleBytes('n'));
  EXPECT_EQ(cache.open_mappings(), 0u);
  EXPECT_EQ(opener.closes, 0);
}

}  // namespace
}  // namespace collective::daemon::gpu
