// The daemon's CUDA kernels on a real GPU (ctest label gpu): the reduction
// kernel against exec::Reduce's contract for every dtype and op, with zeros
// and identities, and the batched copy with aligned and unaligned copies.
// Skipped where CUDA sees no device.
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "common/dtype.h"
#include "daemon/exec/reduce_kernels.h"
#include "daemon/gpu/device_reduce.h"
#include "daemon/gpu/reduce_params.h"
#include "tests/common/reference_reduce.h"

namespace collective::daemon::gpu {
namespace {

using testing::CompareBitwise;
using testing::FillTestData;
using testing::ReferenceReduce;

class DeviceReduceGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      GTEST_SKIP() << "no CUDA device: the kernel tests need one";
    }
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  }

  void* Upload(const std::vector<std::byte>& host) {
    void* device = nullptr;
    EXPECT_EQ(cudaMalloc(&device, host.size() + 16), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(device, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
    buffers_.push_back(device);
    return device;
  }

  std::vector<std::byte> Download(const void* device, size_t bytes) {
    std::vector<std::byte> host(bytes);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(host.data(), device, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

  void TearDown() override {
    for (void* buffer : buffers_) cudaFree(buffer);
  }

  std::vector<void*> buffers_;
};

TEST_F(DeviceReduceGpuTest, MatchesTheHostContract) {
  constexpr size_t kCount = 100003;
  for (int dtype = v1::DATA_TYPE_UINT8; dtype <= v1::DATA_TYPE_BOOL; ++dtype) {
    const auto type = static_cast<v1::DataType>(dtype);
    for (v1::ReduceOp op :
         {v1::REDUCE_OP_SUM, v1::REDUCE_OP_MIN, v1::REDUCE_OP_MAX, v1::REDUCE_OP_PRODUCT}) {
      if (!exec::IsReducible(type, op)) continue;
      const size_t bytes = kCount * ElementSize(type);
      std::vector<std::vector<std::byte>> inputs(3, std::vector<std::byte>(bytes));
      std::vector<const void*> host_inputs;
      std::vector<const void*> device_inputs;
      for (size_t j = 0; j < inputs.size(); ++j) {
        FillTestData(type, op, j + 7, inputs[j].data(), kCount);
        host_inputs.push_back(inputs[j].data());
        device_inputs.push_back(Upload(inputs[j]));
      }
      device_inputs.push_back(nullptr);  // a joined rank's zeros
      std::vector<std::byte> zeros(bytes);
      host_inputs.push_back(zeros.data());
      const bool logical = type == v1::DATA_TYPE_BOOL;
      const exec::ReduceSpec spec{.dtype = type,
                                  .op = op,
                                  .prescale = logical ? 1.0 : 0.5,
                                  .postscale = logical ? 1.0 : 3.0,
                                  .divisor = logical ? 1 : 2};
      void* out = Upload(std::vector<std::byte>(bytes));
      const auto params = ReduceParamsOf(spec, device_inputs, out, kCount);
      ASSERT_TRUE(params.ok());
      ASSERT_EQ(kernels::LaunchReduce(*params, nullptr), cudaSuccess);
      std::vector<std::byte> expected(bytes);
      ReferenceReduce(spec, host_inputs, expected.data(), kCount);
      // The device's own float16/bfloat16 conversions may quiet NaNs
      // differently; the test data has none.
      EXPECT_EQ(CompareBitwise(type, expected.data(), Download(out, bytes).data(), kCount), "")
          << DataTypeName(type) << " " << ReduceOpName(op);
    }
  }
}

TEST_F(DeviceReduceGpuTest, BatchedCopiesMoveEveryByte) {
  std::vector<std::byte> source(1 << 20);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<std::byte>(i * 7 + 3);
  std::byte* from = static_cast<std::byte*>(Upload(source));
  std::byte* to = static_cast<std::byte*>(Upload(std::vector<std::byte>(source.size())));
  kernels::CopyParams params{};
  // Aligned, unaligned, empty and one-byte copies into disjoint places.
  const std::vector<std::pair<size_t, size_t>> ranges = {
      {0, 4096}, {4096 + 3, 1001}, {8192, 0}, {9000, 1}, {16384, (1 << 20) - 16384}};
  for (const auto& [offset, bytes] : ranges) {
    params.sources[params.count] = from + offset;
    params.destinations[params.count] = to + offset;
    params.bytes[params.count] = bytes;
    ++params.count;
  }
  ASSERT_EQ(kernels::LaunchCopies(params, nullptr), cudaSuccess);
  const std::vector<std::byte> copied = Download(to, source.size());
  for (const auto& [offset, bytes] : ranges) {
    EXPECT_EQ(std::memcmp(copied.data() + offset, source.data() + offset, bytes), 0) << offset;
  }
}

}  // namespace
}  // namespace collective::daemon::gpu
