// daemon/gpu/device_math.h, the arithmetic of the device reduction kernel,
// compiled for the CPU and held to exec::Reduce's contract bit for bit
// (tests/common/reference_reduce.h is its oracle): every dtype and op, one to
// several inputs, zeros for joined ranks, scale factors, NaN and signed
// zeros; and the identities that stand in for devices without a member.
#include "daemon/gpu/device_math.h"

#include <bit>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/dtype.h"
#include "common/half.h"
#include "daemon/exec/reduce_kernels.h"
#include "daemon/gpu/reduce_params.h"
#include "tests/common/reference_reduce.h"

namespace collective::daemon::gpu {
namespace {

using testing::CompareBitwise;
using testing::FillTestData;
using testing::ReferenceReduce;

// Runs the kernel's element function over `count` elements on the host.
void DeviceReduce(const exec::ReduceSpec& spec, const std::vector<const void*>& inputs, void* out,
                  size_t count) {
  const auto params = ReduceParamsOf(spec, inputs, out, count);
  ASSERT_TRUE(params.ok()) << params.status();
  ASSERT_TRUE(ReduceOnHost(*params)) << DataTypeName(spec.dtype) << " " << ReduceOpName(spec.op);
}

struct Scales {
  double prescale;
  double postscale;
  int64_t divisor;
};

constexpr v1::DataType kTypes[] = {
    v1::DATA_TYPE_UINT8,   v1::DATA_TYPE_INT8,    v1::DATA_TYPE_UINT16,  v1::DATA_TYPE_INT16,
    v1::DATA_TYPE_INT32,   v1::DATA_TYPE_INT64,   v1::DATA_TYPE_FLOAT16, v1::DATA_TYPE_BFLOAT16,
    v1::DATA_TYPE_FLOAT32, v1::DATA_TYPE_FLOAT64, v1::DATA_TYPE_BOOL};
constexpr v1::ReduceOp kOps[] = {v1::REDUCE_OP_SUM, v1::REDUCE_OP_MIN, v1::REDUCE_OP_MAX,
                                 v1::REDUCE_OP_PRODUCT};

TEST(DeviceMathTest, MatchesTheHostKernelsContractBitForBit) {
  constexpr size_t kCount = 301;
  const std::vector<Scales> scales = {
      {1, 1, 1}, {0.5, 1, 1}, {1, 3, 1}, {1, 1, 4}, {-1.5, 0.25, 3}};
  for (v1::DataType dtype : kTypes) {
    const size_t element = ElementSize(dtype);
    for (v1::ReduceOp op : kOps) {
      if (!exec::IsReducible(dtype, op)) continue;
      for (size_t k = 1; k <= 4; ++k) {
        std::vector<std::vector<std::byte>> data(k, std::vector<std::byte>(kCount * element));
        for (size_t j = 0; j < k; ++j) FillTestData(dtype, op, 17 * j + k, data[j].data(), kCount);
        std::vector<const void*> inputs;
        for (const auto& buffer : data) inputs.push_back(buffer.data());
        for (const Scales& scale : scales) {
          if (dtype == v1::DATA_TYPE_BOOL && scale.prescale != 1) continue;
          const exec::ReduceSpec spec{.dtype = dtype,
                                      .op = op,
                                      .prescale = scale.prescale,
                                      .postscale = scale.postscale,
                                      .divisor = scale.divisor};
          std::vector<std::byte> expected(kCount * element);
          std::vector<std::byte> actual(kCount * element);
          ReferenceReduce(spec, inputs, expected.data(), kCount);
          DeviceReduce(spec, inputs, actual.data(), kCount);
          EXPECT_EQ(CompareBitwise(dtype, expected.data(), actual.data(), kCount), "")
              << DataTypeName(dtype) << " " << ReduceOpName(op) << ", " << k << " inputs, scales "
              << scale.prescale << "/" << scale.postscale << "/" << scale.divisor;
        }
      }
    }
  }
}

TEST(DeviceMathTest, ANullInputIsZeros) {
  constexpr size_t kCount = 64;
  for (v1::DataType dtype : kTypes) {
    const size_t element = ElementSize(dtype);
    for (v1::ReduceOp op : kOps) {
      if (!exec::IsReducible(dtype, op)) continue;
      std::vector<std::byte> data(kCount * element);
      std::vector<std::byte> zeros(kCount * element);
      FillTestData(dtype, op, 3, data.data(), kCount);
      const exec::ReduceSpec spec{.dtype = dtype, .op = op};
      std::vector<std::byte> expected(kCount * element);
      std::vector<std::byte> actual(kCount * element);
      ReferenceReduce(spec, std::vector<const void*>{data.data(), zeros.data()}, expected.data(),
                      kCount);
      DeviceReduce(spec, {data.data(), nullptr}, actual.data(), kCount);
      EXPECT_EQ(CompareBitwise(dtype, expected.data(), actual.data(), kCount), "")
          << DataTypeName(dtype) << " " << ReduceOpName(op);
    }
  }
}

TEST(DeviceMathTest, NoInputGivesTheOpsIdentity) {
  const auto identity = [](v1::DataType dtype, v1::ReduceOp op) {
    std::vector<std::byte> out(ElementSize(dtype));
    DeviceReduce({.dtype = dtype, .op = op}, {}, out.data(), 1);
    return out;
  };
  const auto as = []<typename T>(const std::vector<std::byte>& bytes, T) {
    T value;
    std::memcpy(&value, bytes.data(), sizeof(T));
    return value;
  };
  EXPECT_EQ(as(identity(v1::DATA_TYPE_INT32, v1::REDUCE_OP_SUM), int32_t{}), 0);
  EXPECT_EQ(as(identity(v1::DATA_TYPE_INT32, v1::REDUCE_OP_PRODUCT), int32_t{}), 1);
  EXPECT_EQ(as(identity(v1::DATA_TYPE_INT8, v1::REDUCE_OP_MIN), int8_t{}), 127);
  EXPECT_EQ(as(identity(v1::DATA_TYPE_INT64, v1::REDUCE_OP_MAX), int64_t{}),
            std::numeric_limits<int64_t>::min());
  EXPECT_EQ(as(identity(v1::DATA_TYPE_UINT8, v1::REDUCE_OP_MIN), uint8_t{}), 255);
  EXPECT_EQ(as(identity(v1::DATA_TYPE_UINT8, v1::REDUCE_OP_MAX), uint8_t{}), 0);
  EXPECT_EQ(as(identity(v1::DATA_TYPE_BOOL, v1::REDUCE_OP_MIN), uint8_t{}), 1) << "and";
  EXPECT_EQ(as(identity(v1::DATA_TYPE_BOOL, v1::REDUCE_OP_MAX), uint8_t{}), 0) << "or";
  const float sum = as(identity(v1::DATA_TYPE_FLOAT32, v1::REDUCE_OP_SUM), float{});
  EXPECT_EQ(std::bit_cast<uint32_t>(sum), 0x80000000u) << "-0: adding it keeps a -0 too";
  EXPECT_EQ(as(identity(v1::DATA_TYPE_FLOAT64, v1::REDUCE_OP_MIN), double{}),
            std::numeric_limits<double>::infinity());
  EXPECT_EQ(HalfToFloat(as(identity(v1::DATA_TYPE_FLOAT16, v1::REDUCE_OP_MAX), uint16_t{})),
            -std::numeric_limits<float>::infinity());
  EXPECT_EQ(
      BFloat16ToFloat(as(identity(v1::DATA_TYPE_BFLOAT16, v1::REDUCE_OP_PRODUCT), uint16_t{})),
      1.0f);
}

TEST(DeviceMathTest, NansAndSignedZerosFollowTheContract) {
  const float nan_a = std::bit_cast<float>(0x7fc00001u);
  const float nan_b = std::bit_cast<float>(0xffa00002u);  // signalling, negative
  const std::vector<float> left = {nan_a, 1.0f, -0.0f, 0.0f, nan_b, 2.0f};
  const std::vector<float> right = {nan_b, nan_b, 0.0f, -0.0f, 1.0f, -3.0f};
  for (v1::ReduceOp op : kOps) {
    const exec::ReduceSpec spec{.dtype = v1::DATA_TYPE_FLOAT32, .op = op};
    std::vector<float> expected(left.size());
    std::vector<float> actual(left.size());
    ReferenceReduce(spec, std::vector<const void*>{left.data(), right.data()}, expected.data(),
                    left.size());
    DeviceReduce(spec, {left.data(), right.data()}, actual.data(), left.size());
    EXPECT_EQ(CompareBitwise(v1::DATA_TYPE_FLOAT32, expected.data(), actual.data(), left.size()),
              "")
        << ReduceOpName(op);
  }
}

TEST(DeviceMathTest, EveryReducibleTypeAndOpHasAKernel) {
  for (v1::DataType dtype : kTypes) {
    for (v1::ReduceOp op : kOps) {
      const bool kernel = math::Visit(dtype, op, []<class, int>() {});
      EXPECT_EQ(kernel, exec::IsReducible(dtype, op))
          << DataTypeName(dtype) << " " << ReduceOpName(op);
    }
  }
  EXPECT_FALSE(math::Visit(v1::DATA_TYPE_FLOAT32, v1::REDUCE_OP_AVERAGE, []<class, int>() {}));
}

}  // namespace
}  // namespace collective::daemon::gpu
