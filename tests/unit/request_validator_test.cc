// daemon/request_validator: every rule, its status code and its message, and
// the boundaries that must still pass.
#include "daemon/request_validator.h"

#include <cmath>
#include <limits>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace collective::daemon {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr uint64_t kArena = 1 << 20;

RequestLimits Limits() {
  return {.max_name_bytes = 64, .max_dims = kMaxDims, .arena_bytes = kArena};
}

// A valid float32 sum allreduce of 4 elements at offset 128.
v1::TensorRequest Valid() {
  v1::TensorRequest request;
  request.set_request_id(17);
  request.set_name("layer1.weight");
  request.set_collective(v1::COLLECTIVE_ALLREDUCE);
  request.set_op(v1::REDUCE_OP_SUM);
  request.set_dtype(v1::DATA_TYPE_FLOAT32);
  request.add_shape(2);
  request.add_shape(2);
  request.set_offset(128);
  request.set_length(16);
  return request;
}

absl::Status Validate(const v1::TensorRequest& request, RequestLimits limits = Limits()) {
  return ValidateRequest(request, limits);
}

// The message without the "request 17 ('layer1.weight'): " prefix.
std::string Reason(const absl::Status& status) {
  const std::string message(status.message());
  const size_t colon = message.find("): ");
  return colon == std::string::npos ? message : message.substr(colon + 3);
}

TEST(RequestValidatorTest, AcceptsAValidRequest) { EXPECT_TRUE(Validate(Valid()).ok()); }

TEST(RequestValidatorTest, AcceptsBoundaries) {
  v1::TensorRequest scalar = Valid();
  scalar.clear_shape();
  scalar.set_length(4);
  EXPECT_TRUE(Validate(scalar).ok()) << "a scalar has one element";

  v1::TensorRequest empty = Valid();
  empty.set_shape(0, 0);
  empty.set_length(0);
  empty.set_offset(kArena);
  EXPECT_TRUE(Validate(empty).ok()) << "an empty tensor may sit at the arena's end";

  v1::TensorRequest at_end = Valid();
  at_end.set_offset(kArena - 16);
  EXPECT_TRUE(Validate(at_end).ok()) << "the last 16 bytes of the arena";

  v1::TensorRequest longest = Valid();
  longest.set_name(std::string(64, 'n'));
  EXPECT_TRUE(Validate(longest).ok()) << "a name of exactly max_name_bytes";

  v1::TensorRequest dims = Valid();
  dims.clear_shape();
  for (uint32_t i = 0; i < kMaxDims; ++i) dims.add_shape(1);
  dims.set_length(4);
  EXPECT_TRUE(Validate(dims).ok()) << "exactly max_dims dimensions";

  v1::TensorRequest scaled = Valid();
  scaled.set_prescale(0.5);
  scaled.set_postscale(-3);
  EXPECT_TRUE(Validate(scaled).ok());

  v1::TensorRequest unicode = Valid();
  unicode.set_name("gewicht.\u00fcber");
  EXPECT_TRUE(Validate(unicode).ok()) << "bytes >= 0x80 are not control characters";
}

TEST(RequestValidatorTest, AcceptsEveryOpOnEveryNumericType) {
  const v1::DataType numeric[] = {
      v1::DATA_TYPE_UINT8,   v1::DATA_TYPE_INT8,   v1::DATA_TYPE_UINT16,  v1::DATA_TYPE_INT16,
      v1::DATA_TYPE_INT32,   v1::DATA_TYPE_INT64,  v1::DATA_TYPE_FLOAT16, v1::DATA_TYPE_BFLOAT16,
      v1::DATA_TYPE_FLOAT32, v1::DATA_TYPE_FLOAT64};
  const size_t sizes[] = {1, 1, 2, 2, 4, 8, 2, 2, 4, 8};
  const v1::ReduceOp ops[] = {v1::REDUCE_OP_SUM, v1::REDUCE_OP_AVERAGE, v1::REDUCE_OP_MIN,
                              v1::REDUCE_OP_MAX, v1::REDUCE_OP_PRODUCT};
  for (size_t t = 0; t < std::size(numeric); ++t) {
    for (v1::ReduceOp op : ops) {
      v1::TensorRequest request = Valid();
      request.set_dtype(numeric[t]);
      request.set_op(op);
      request.set_length(4 * sizes[t]);
      EXPECT_TRUE(Validate(request).ok()) << numeric[t] << " " << op << ": " << Validate(request);
    }
  }
}

TEST(RequestValidatorTest, BoolSupportsMinAndMaxAndUnitScales) {
  for (v1::ReduceOp op : {v1::REDUCE_OP_MIN, v1::REDUCE_OP_MAX}) {
    v1::TensorRequest request = Valid();
    request.set_dtype(v1::DATA_TYPE_BOOL);
    request.set_op(op);
    request.set_length(4);
    request.set_prescale(1);
    request.set_postscale(1);
    EXPECT_TRUE(Validate(request).ok()) << Validate(request);
  }
  for (v1::ReduceOp op : {v1::REDUCE_OP_SUM, v1::REDUCE_OP_AVERAGE, v1::REDUCE_OP_PRODUCT}) {
    v1::TensorRequest request = Valid();
    request.set_dtype(v1::DATA_TYPE_BOOL);
    request.set_op(op);
    request.set_length(4);
    const absl::Status status = Validate(request);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Reason(status), HasSubstr("is not defined for bool tensors (bool supports min and "
                                          "max)"));
  }
  v1::TensorRequest sum = Valid();
  sum.set_dtype(v1::DATA_TYPE_BOOL);
  sum.set_length(4);
  EXPECT_EQ(Reason(Validate(sum)),
            "reduce op sum is not defined for bool tensors (bool supports min and max)");
}

TEST(RequestValidatorTest, MessagesNameTheRequestAndItsTensor) {
  v1::TensorRequest request = Valid();
  request.set_process_set_id(2);
  EXPECT_EQ(Validate(request).message(),
            "request 17 ('layer1.weight'): process set 2 does not exist");
}

TEST(RequestValidatorTest, QuotesOnlyABoundedSanitisedPrefixOfTheName) {
  v1::TensorRequest request = Valid();
  request.set_name(std::string(65, 'n'));
  EXPECT_EQ(Validate(request).message(), "request 17 ('" + std::string(64, 'n') +
                                             "...'): the tensor name has 65 bytes; the "
                                             "limit is 64");

  // At most 128 bytes are quoted, whatever the limit.
  RequestLimits generous = Limits();
  generous.max_name_bytes = 4096;
  request.set_name(std::string(300, 'm'));
  request.set_process_set_id(1);
  EXPECT_THAT(std::string(Validate(request, generous).message()),
              StartsWith("request 17 ('" + std::string(128, 'm') + "...'): "));

  request.set_name("a\tb\x01");
  EXPECT_THAT(std::string(Validate(request).message()), StartsWith("request 17 ('a?b?'): "));
}

// The message travels in a proto3 string (RequestFailed.message), which must
// be valid UTF-8: the client's parser rejects the whole message otherwise.
TEST(RequestValidatorTest, QuotedPrefixIsValidUtf8AndFreeOfControlCharacters) {
  auto valid_utf8 = [](const std::string& text) {
    for (size_t i = 0; i < text.size();) {
      const auto lead = static_cast<unsigned char>(text[i]);
      const size_t length = lead < 0x80         ? 1
                            : (lead >> 5) == 6  ? 2
                            : (lead >> 4) == 14 ? 3
                            : (lead >> 3) == 30 ? 4
                                                : 0;
      if (length == 0 || i + length > text.size()) return false;
      for (size_t k = 1; k < length; ++k) {
        if ((static_cast<unsigned char>(text[i + k]) >> 6) != 2) return false;
      }
      i += length;
    }
    return true;
  };
  RequestLimits generous = Limits();
  generous.max_name_bytes = 4096;
  v1::TensorRequest request = Valid();
  request.set_process_set_id(1);
  std::string name = "a";  // puts every 2-byte character at an odd offset
  for (int i = 0; i < 100; ++i) name += "\u00e9";
  request.set_name(name);
  const std::string message(Validate(request, generous).message());
  EXPECT_TRUE(valid_utf8(message)) << "the 128-byte cut splits a character: " << message;

  request.set_name("del\x7f");
  const std::string del(Validate(request).message());
  EXPECT_EQ(del.find('\x7f'), std::string::npos) << "DEL is quoted raw: " << del;
}

struct FieldCase {
  std::string label;
  void (*edit)(v1::TensorRequest&);
  absl::StatusCode code;
  std::string reason;  // the exact message after the request prefix
};

class RequestValidatorFieldTest : public ::testing::TestWithParam<FieldCase> {};

TEST_P(RequestValidatorFieldTest, RefusesWithCodeAndReason) {
  v1::TensorRequest request = Valid();
  GetParam().edit(request);
  const absl::Status status = Validate(request);
  EXPECT_EQ(status.code(), GetParam().code) << status;
  EXPECT_THAT(std::string(status.message()), StartsWith("request 17 ("));
  EXPECT_EQ(Reason(status), GetParam().reason);
}

constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
constexpr auto kUnimplemented = absl::StatusCode::kUnimplemented;

INSTANTIATE_TEST_SUITE_P(
    Fields, RequestValidatorFieldTest,
    ::testing::Values(
        FieldCase{"EmptyName", [](auto& r) { r.set_name(""); }, kInvalid,
                  "the tensor name is empty"},
        FieldCase{"LongName", [](auto& r) { r.set_name(std::string(100, 'x')); }, kInvalid,
                  "the tensor name has 100 bytes; the limit is 64"},
        FieldCase{"NewlineInName", [](auto& r) { r.set_name("a\nb"); }, kInvalid,
                  "the tensor name contains a control character"},
        FieldCase{"NulInName", [](auto& r) { r.set_name(std::string("a\0b", 3)); }, kInvalid,
                  "the tensor name contains a control character"},
        FieldCase{"DelInName", [](auto& r) { r.set_name("a\x7f"); }, kInvalid,
                  "the tensor name contains a control character"},
        FieldCase{"UnspecifiedCollective",
                  [](auto& r) { r.set_collective(v1::COLLECTIVE_UNSPECIFIED); }, kInvalid,
                  "unknown collective unspecified"},
        FieldCase{"UnknownCollective",
                  [](auto& r) { r.set_collective(static_cast<v1::Collective>(99)); }, kInvalid,
                  "unknown collective unknown(99)"},
        FieldCase{"Allgather", [](auto& r) { r.set_collective(v1::COLLECTIVE_ALLGATHER); },
                  kUnimplemented, "allgather is not supported by this daemon version"},
        FieldCase{"Broadcast", [](auto& r) { r.set_collective(v1::COLLECTIVE_BROADCAST); },
                  kUnimplemented, "broadcast is not supported by this daemon version"},
        FieldCase{"Alltoall", [](auto& r) { r.set_collective(v1::COLLECTIVE_ALLTOALL); },
                  kUnimplemented, "alltoall is not supported by this daemon version"},
        FieldCase{"Reducescatter", [](auto& r) { r.set_collective(v1::COLLECTIVE_REDUCESCATTER); },
                  kUnimplemented, "reducescatter is not supported by this daemon version"},
        FieldCase{"Barrier", [](auto& r) { r.set_collective(v1::COLLECTIVE_BARRIER); },
                  kUnimplemented, "barrier is not supported by this daemon version"},
        FieldCase{"Join", [](auto& r) { r.set_collective(v1::COLLECTIVE_JOIN); }, kUnimplemented,
                  "join is not supported by this daemon version"},
        FieldCase{"UnspecifiedDtype", [](auto& r) { r.set_dtype(v1::DATA_TYPE_UNSPECIFIED); },
                  kInvalid, "unknown dtype unspecified"},
        FieldCase{"UnknownDtype", [](auto& r) { r.set_dtype(static_cast<v1::DataType>(99)); },
                  kInvalid, "unknown dtype unknown(99)"},
        FieldCase{"UnspecifiedOp", [](auto& r) { r.set_op(v1::REDUCE_OP_UNSPECIFIED); }, kInvalid,
                  "unknown reduce op unspecified"},
        FieldCase{"UnknownOp", [](auto& r) { r.set_op(static_cast<v1::ReduceOp>(-3)); }, kInvalid,
                  "unknown reduce op unknown(-3)"},
        FieldCase{"Adasum", [](auto& r) { r.set_op(v1::REDUCE_OP_ADASUM); }, kUnimplemented,
                  "the adasum reduce op is not implemented"},
        FieldCase{"NanPrescale",
                  [](auto& r) { r.set_prescale(std::numeric_limits<double>::quiet_NaN()); },
                  kInvalid, "prescale nan is not a finite number"},
        FieldCase{"InfinitePrescale",
                  [](auto& r) { r.set_prescale(std::numeric_limits<double>::infinity()); },
                  kInvalid, "prescale inf is not a finite number"},
        FieldCase{"NanPostscale",
                  [](auto& r) { r.set_postscale(std::numeric_limits<double>::quiet_NaN()); },
                  kInvalid, "postscale nan is not a finite number"},
        FieldCase{"InfinitePostscale",
                  [](auto& r) { r.set_postscale(-std::numeric_limits<double>::infinity()); },
                  kInvalid, "postscale -inf is not a finite number"},
        FieldCase{"BoolPrescale",
                  [](auto& r) {
                    r.set_dtype(v1::DATA_TYPE_BOOL);
                    r.set_op(v1::REDUCE_OP_MAX);
                    r.set_length(4);
                    r.set_prescale(2);
                  },
                  kInvalid, "prescale must be 1 for bool tensors"},
        FieldCase{"BoolPostscale",
                  [](auto& r) {
                    r.set_dtype(v1::DATA_TYPE_BOOL);
                    r.set_op(v1::REDUCE_OP_MIN);
                    r.set_length(4);
                    r.set_postscale(0);
                  },
                  kInvalid, "postscale must be 1 for bool tensors"},
        FieldCase{"TooManyDims",
                  [](auto& r) {
                    r.clear_shape();
                    for (int i = 0; i < 65; ++i) r.add_shape(1);
                  },
                  kInvalid, "the shape has 65 dimensions; the limit is 64"},
        FieldCase{"NegativeDim", [](auto& r) { r.set_shape(1, -2); }, kInvalid,
                  "dimension 1 of shape [2, -2] is negative"},
        FieldCase{"ElementCountOverflow",
                  [](auto& r) {
                    r.set_shape(0, int64_t{1} << 32);
                    r.set_shape(1, int64_t{1} << 32);
                  },
                  kInvalid, "shape [4294967296, 4294967296] has more elements than fit in 64 bits"},
        FieldCase{"ByteCountOverflow",
                  [](auto& r) {
                    r.clear_shape();
                    r.add_shape(int64_t{1} << 62);
                  },
                  kInvalid,
                  "length 16 does not match shape [4611686018427387904] of float32 "
                  "(4611686018427387904 elements of 4 bytes)"},
        FieldCase{"LengthTooShort", [](auto& r) { r.set_length(15); }, kInvalid,
                  "length 15 does not match shape [2, 2] of float32 (4 elements of 4 bytes)"},
        FieldCase{"LengthTooLong", [](auto& r) { r.set_length(32); }, kInvalid,
                  "length 32 does not match shape [2, 2] of float32 (4 elements of 4 bytes)"},
        FieldCase{"OffsetPastArena", [](auto& r) { r.set_offset(kArena); }, kInvalid,
                  "offset 1048576 + length 16 lies outside the client's arena of 1048576 bytes"},
        FieldCase{"EndPastArena", [](auto& r) { r.set_offset(kArena - 15); }, kInvalid,
                  "offset 1048561 + length 16 lies outside the client's arena of 1048576 bytes"},
        FieldCase{"OffsetOverflow",
                  [](auto& r) { r.set_offset(std::numeric_limits<uint64_t>::max() - 3); }, kInvalid,
                  "offset 18446744073709551612 + length 16 lies outside the client's arena of "
                  "1048576 bytes"},
        FieldCase{"ProcessSet", [](auto& r) { r.set_process_set_id(-1); }, kInvalid,
                  "process set -1 does not exist"},
        FieldCase{"Group", [](auto& r) { r.set_group_id(9); }, kUnimplemented,
                  "grouped requests are not supported by this daemon version"},
        FieldCase{"Splits", [](auto& r) { r.add_splits(1); }, kInvalid,
                  "splits apply only to alltoall"}),
    [](const auto& param_info) { return param_info.param.label; });

TEST(RequestValidatorTest, EmptyArenaAdmitsOnlyEmptyTensors) {
  RequestLimits none = Limits();
  none.arena_bytes = 0;
  EXPECT_EQ(Validate(Valid(), none).code(), absl::StatusCode::kInvalidArgument);
  v1::TensorRequest empty = Valid();
  empty.set_shape(0, 0);
  empty.set_length(0);
  empty.set_offset(0);
  EXPECT_TRUE(Validate(empty, none).ok());
}

}  // namespace
}  // namespace collective::daemon
