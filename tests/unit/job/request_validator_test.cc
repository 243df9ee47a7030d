// daemon/request_validator: every rule, its status code and its message, and
// the boundaries that must still pass: the fields every request shares, the
// control collectives (no data, no groups, process-set changes on set 0), and
// the data collectives' rules per collective (reduce op and scales only for
// allreduce and reducescatter, rows, splits, root, groups).
#include "daemon/job/request_validator.h"

#include <cmath>
#include <limits>
#include <ostream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/dtype.h"

namespace collective::daemon::job {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
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

// `request` turned into a control collective: no shape, no data.
v1::TensorRequest Control(v1::Collective collective, v1::TensorRequest request = Valid()) {
  request.set_collective(collective);
  request.clear_shape();
  request.set_length(0);
  return request;
}

absl::Status Validate(const v1::TensorRequest& request, job::RequestLimits limits = Limits()) {
  return job::ValidateRequest(request, limits);
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
  for (uint32_t i = 0; i < job::kMaxDims; ++i) dims.add_shape(1);
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

TEST(RequestValidatorTest, AcceptsEveryDataCollective) {
  for (v1::Collective collective :
       {v1::COLLECTIVE_ALLREDUCE, v1::COLLECTIVE_ALLGATHER, v1::COLLECTIVE_BROADCAST,
        v1::COLLECTIVE_ALLTOALL, v1::COLLECTIVE_REDUCESCATTER}) {
    v1::TensorRequest request = Valid();
    request.set_collective(collective);
    EXPECT_TRUE(Validate(request).ok()) << collective << ": " << Validate(request);
    request.set_shape(0, 0);
    request.set_length(0);
    EXPECT_TRUE(Validate(request).ok()) << collective << " of no rows: " << Validate(request);
  }
  v1::TensorRequest average = Valid();
  average.set_collective(v1::COLLECTIVE_REDUCESCATTER);
  average.set_op(v1::REDUCE_OP_AVERAGE);
  average.set_prescale(0.5);
  average.set_postscale(4);
  EXPECT_TRUE(Validate(average).ok()) << "reducescatter averages and scales";

  v1::TensorRequest broadcast_scalar = Valid();
  broadcast_scalar.set_collective(v1::COLLECTIVE_BROADCAST);
  broadcast_scalar.clear_shape();
  broadcast_scalar.set_length(4);
  EXPECT_TRUE(Validate(broadcast_scalar).ok()) << "broadcast needs no rows";
}

TEST(RequestValidatorTest, DataMovementIgnoresTheReduceOp) {
  // Allgather, broadcast and alltoall reduce nothing: whatever the op field
  // says, and for every dtype, bool included; a scale factor of exactly 1
  // changes nothing either.
  for (v1::Collective collective :
       {v1::COLLECTIVE_ALLGATHER, v1::COLLECTIVE_BROADCAST, v1::COLLECTIVE_ALLTOALL}) {
    for (v1::ReduceOp op : {v1::REDUCE_OP_UNSPECIFIED, v1::REDUCE_OP_ADASUM, v1::REDUCE_OP_PRODUCT,
                            static_cast<v1::ReduceOp>(77)}) {
      v1::TensorRequest request = Valid();
      request.set_collective(collective);
      request.set_op(op);
      request.set_dtype(v1::DATA_TYPE_BOOL);
      request.set_length(4);
      request.set_prescale(1);
      request.set_postscale(1);
      EXPECT_TRUE(Validate(request).ok()) << collective << " " << op << ": " << Validate(request);
    }
  }
}

TEST(RequestValidatorTest, AcceptsSplitsThatAddUpToTheFirstDimension) {
  v1::TensorRequest request = Valid();
  request.set_collective(v1::COLLECTIVE_ALLTOALL);
  for (int64_t split : {0, 2, 0}) request.add_splits(split);
  EXPECT_TRUE(Validate(request).ok()) << Validate(request);

  // Rows may go nowhere: a tensor of no rows sends zeros to everyone.
  v1::TensorRequest empty = Valid();
  empty.set_collective(v1::COLLECTIVE_ALLTOALL);
  empty.set_shape(0, 0);
  empty.set_length(0);
  for (int i = 0; i < 4; ++i) empty.add_splits(0);
  EXPECT_TRUE(Validate(empty).ok()) << Validate(empty);
}

// Splits that wrap around int64 when added up must not pass for a sum that
// matches the first dimension: the alltoall op trusts them (rows times row
// bytes sizes the copies), so each split can be no larger than the first
// dimension.
TEST(RequestValidatorTest, RefusesSplitsWhoseSumOverflows) {
  v1::TensorRequest request = Valid();
  request.set_collective(v1::COLLECTIVE_ALLTOALL);
  request.set_shape(0, 0);
  request.set_length(0);
  const int64_t max = std::numeric_limits<int64_t>::max();
  // max + max + 2 = 2^64, which wraps to 0: the first dimension.
  for (int64_t split : {max, max, int64_t{2}}) request.add_splits(split);
  const absl::Status status = Validate(request);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;

  v1::TensorRequest two = Valid();
  two.set_collective(v1::COLLECTIVE_ALLTOALL);
  for (int64_t split : {max, max, int64_t{4}}) two.add_splits(split);  // wraps to 2
  EXPECT_EQ(Validate(two).code(), absl::StatusCode::kInvalidArgument) << Validate(two);
}

TEST(RequestValidatorTest, AcceptsAnyNonNegativeRoot) {
  // Whether the root is a rank of the set is the op's to judge, with the
  // set's size.
  for (int32_t root : {0, 1, 1000, std::numeric_limits<int32_t>::max()}) {
    v1::TensorRequest request = Valid();
    request.set_collective(v1::COLLECTIVE_BROADCAST);
    request.set_root_rank(root);
    EXPECT_TRUE(Validate(request).ok()) << root << ": " << Validate(request);
  }
  // Other collectives ignore the field.
  v1::TensorRequest allreduce = Valid();
  allreduce.set_root_rank(-5);
  EXPECT_TRUE(Validate(allreduce).ok()) << Validate(allreduce);
}

TEST(RequestValidatorTest, AcceptsGroupsOfAllreduceAllgatherAndReducescatter) {
  for (v1::Collective collective :
       {v1::COLLECTIVE_ALLREDUCE, v1::COLLECTIVE_ALLGATHER, v1::COLLECTIVE_REDUCESCATTER}) {
    for (uint32_t size : {1u, 2u, job::kMaxGroupSize}) {
      v1::TensorRequest request = Valid();
      request.set_collective(collective);
      request.set_group_id(~uint64_t{0});
      request.set_group_size(size);
      EXPECT_TRUE(Validate(request).ok()) << collective << " " << size << ": " << Validate(request);
    }
  }
  v1::TensorRequest ungrouped = Valid();
  ungrouped.set_group_size(7);
  EXPECT_TRUE(Validate(ungrouped).ok()) << "without a group id, the size means nothing";
}

TEST(RequestValidatorTest, AcceptsControlCollectives) {
  for (v1::Collective collective : {v1::COLLECTIVE_BARRIER, v1::COLLECTIVE_JOIN}) {
    v1::TensorRequest request = Control(collective);
    EXPECT_TRUE(Validate(request).ok()) << collective << ": " << Validate(request);
    // Of any process set; dtype, op and offset mean nothing to them.
    request.set_process_set_id(3);
    request.set_dtype(v1::DATA_TYPE_UNSPECIFIED);
    request.set_op(v1::REDUCE_OP_UNSPECIFIED);
    request.set_offset(kArena * 2);
    EXPECT_TRUE(Validate(request).ok()) << collective << ": " << Validate(request);
  }
  v1::TensorRequest add = Control(v1::COLLECTIVE_ADD_PROCESS_SET);
  for (int32_t rank : {2, 0}) add.add_process_set_ranks(rank);
  EXPECT_TRUE(Validate(add).ok()) << Validate(add);
  v1::TensorRequest remove = Control(v1::COLLECTIVE_REMOVE_PROCESS_SET);
  remove.set_target_process_set_id(1);
  EXPECT_TRUE(Validate(remove).ok()) << Validate(remove);
}

TEST(RequestValidatorTest, ProcessSetChangesAreCollectivesOfTheGlobalSet) {
  // Their messages name the collective (not "unknown(8)").
  v1::TensorRequest add = Control(v1::COLLECTIVE_ADD_PROCESS_SET);
  add.add_process_set_ranks(0);
  add.set_process_set_id(1);
  absl::Status status = Validate(add);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Reason(status), EndsWith(" is a collective of the global process set (id 0)"));
  EXPECT_THAT(Reason(status), Not(HasSubstr("unknown")));

  v1::TensorRequest remove = Control(v1::COLLECTIVE_REMOVE_PROCESS_SET);
  remove.set_target_process_set_id(1);
  remove.set_process_set_id(1);
  status = Validate(remove);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Reason(status), EndsWith(" is a collective of the global process set (id 0)"));
  EXPECT_THAT(Reason(status), Not(HasSubstr("unknown")));

  v1::TensorRequest with_data = Valid();
  with_data.set_collective(v1::COLLECTIVE_REMOVE_PROCESS_SET);
  status = Validate(with_data);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Reason(status), EndsWith(" carries no tensor data"));
  EXPECT_THAT(Reason(status), Not(HasSubstr("unknown")));
}

TEST(RequestValidatorTest, MessagesNameTheRequestAndItsTensor) {
  v1::TensorRequest request = Valid();
  request.set_process_set_id(-2);
  EXPECT_EQ(Validate(request).message(),
            "request 17 ('layer1.weight'): process set -2 does not exist");
}

TEST(RequestValidatorTest, ExistingProcessSetsAreNotItsBusiness) {
  // Whether set 2 exists, and whether the client is a member, only the job
  // knows (ProcessSetTable::FindForMember); the validator refuses only ids
  // that can never exist.
  v1::TensorRequest request = Valid();
  request.set_process_set_id(2);
  EXPECT_TRUE(Validate(request).ok()) << Validate(request);
  request.set_process_set_id(std::numeric_limits<int32_t>::max());
  EXPECT_TRUE(Validate(request).ok()) << Validate(request);
}

TEST(RequestValidatorTest, QuotesOnlyABoundedSanitisedPrefixOfTheName) {
  v1::TensorRequest request = Valid();
  request.set_name(std::string(65, 'n'));
  EXPECT_EQ(Validate(request).message(), "request 17 ('" + std::string(64, 'n') +
                                             "...'): the tensor name has 65 bytes; the "
                                             "limit is 64");

  // At most 128 bytes are quoted, whatever the limit.
  job::RequestLimits generous = Limits();
  generous.max_name_bytes = 4096;
  request.set_name(std::string(300, 'm'));
  request.set_process_set_id(-1);
  EXPECT_THAT(std::string(Validate(request, generous).message()),
              StartsWith("request 17 ('" + std::string(128, 'm') + "...'): "));

  request.set_name("a\tb\x01");
  EXPECT_THAT(std::string(Validate(request).message()), StartsWith("request 17 ('a?b?'): "));
}

// The message becomes the text of the request's completion record, which the
// client hands on as a message (a Python str among others) that must be
// valid UTF-8.
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
  job::RequestLimits generous = Limits();
  generous.max_name_bytes = 4096;
  v1::TensorRequest request = Valid();
  request.set_process_set_id(-1);
  std::string name = "a";  // puts every 2-byte character at an odd offset
  for (int i = 0; i < 100; ++i) name += "\u00e9";
  request.set_name(name);
  const std::string message(Validate(request, generous).message());
  ASSERT_THAT(message, HasSubstr("process set -1 does not exist")) << "the request must fail";
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

void PrintTo(const FieldCase& field_case, std::ostream* os) { *os << field_case.label; }

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
        // Control collectives carry no data and cannot be grouped.
        FieldCase{"BarrierWithData", [](auto& r) { r.set_collective(v1::COLLECTIVE_BARRIER); },
                  kInvalid, "barrier carries no tensor data"},
        FieldCase{"JoinWithData", [](auto& r) { r.set_collective(v1::COLLECTIVE_JOIN); },
                  kInvalid, "join carries no tensor data"},
        FieldCase{"BarrierWithAShapeOnly",
                  [](auto& r) {
                    r = Control(v1::COLLECTIVE_BARRIER, r);
                    r.add_shape(0);
                  },
                  kInvalid, "barrier carries no tensor data"},
        FieldCase{"JoinWithALengthOnly",
                  [](auto& r) {
                    r = Control(v1::COLLECTIVE_JOIN, r);
                    r.set_length(4);
                  },
                  kInvalid, "join carries no tensor data"},
        FieldCase{"GroupedBarrier",
                  [](auto& r) {
                    r = Control(v1::COLLECTIVE_BARRIER, r);
                    r.set_group_id(3);
                    r.set_group_size(2);
                  },
                  kInvalid, "barrier cannot be part of a group"},
        FieldCase{"GroupedJoin",
                  [](auto& r) {
                    r = Control(v1::COLLECTIVE_JOIN, r);
                    r.set_group_id(3);
                    r.set_group_size(1);
                  },
                  kInvalid, "join cannot be part of a group"},
        FieldCase{"AddProcessSetWithoutRanks",
                  [](auto& r) { r = Control(v1::COLLECTIVE_ADD_PROCESS_SET, r); }, kInvalid,
                  "a process set needs at least one rank"},
        FieldCase{"BarrierOnANegativeSet",
                  [](auto& r) {
                    r = Control(v1::COLLECTIVE_BARRIER, r);
                    r.set_process_set_id(-3);
                  },
                  kInvalid, "process set -3 does not exist"},
        FieldCase{"ControlNameStillChecked",
                  [](auto& r) {
                    r = Control(v1::COLLECTIVE_BARRIER, r);
                    r.set_name("");
                  },
                  kInvalid, "the tensor name is empty"},
        FieldCase{"UnspecifiedDtype", [](auto& r) { r.set_dtype(v1::DATA_TYPE_UNSPECIFIED); },
                  kInvalid, "unknown dtype unspecified"},
        FieldCase{"UnknownDtype", [](auto& r) { r.set_dtype(static_cast<v1::DataType>(99)); },
                  kInvalid, "unknown dtype unknown(99)"},
        FieldCase{"UnspecifiedOp", [](auto& r) { r.set_op(v1::REDUCE_OP_UNSPECIFIED); }, kInvalid,
                  "unknown reduce op unspecified"},
        FieldCase{"UnknownOp", [](auto& r) { r.set_op(static_cast<v1::ReduceOp>(-3)); }, kInvalid,
                  "unknown reduce op unknown(-3)"},
        FieldCase{"AdasumOfIntegers",
                  [](auto& r) {
                    r.set_op(v1::REDUCE_OP_ADASUM);
                    r.set_dtype(v1::DATA_TYPE_INT32);
                  },
                  kInvalid,
                  "reduce op adasum is not defined for int32 tensors (it supports float16, "
                  "bfloat16, float32 and float64)"},
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
        FieldCase{"Splits", [](auto& r) { r.add_splits(1); }, kInvalid,
                  "splits apply only to alltoall"},
        // The reduce op and scale factors belong to allreduce and
        // reducescatter.
        FieldCase{"AllgatherPrescale",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_ALLGATHER);
                    r.set_prescale(2);
                  },
                  kInvalid, "prescale applies to allreduce, reducescatter and reduce, not allgather"},
        FieldCase{"BroadcastPostscale",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_BROADCAST);
                    r.set_postscale(0.5);
                  },
                  kInvalid, "postscale applies to allreduce, reducescatter and reduce, not broadcast"},
        FieldCase{"AlltoallNanPrescale",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_ALLTOALL);
                    r.set_prescale(std::numeric_limits<double>::quiet_NaN());
                  },
                  kInvalid, "prescale applies to allreduce, reducescatter and reduce, not alltoall"},
        FieldCase{"ReducescatterMax",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_REDUCESCATTER);
                    r.set_op(v1::REDUCE_OP_MAX);
                  },
                  kInvalid, "reducescatter supports the sum and average reduce ops, not max"},
        FieldCase{"ReducescatterMin",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_REDUCESCATTER);
                    r.set_op(v1::REDUCE_OP_MIN);
                  },
                  kInvalid, "reducescatter supports the sum and average reduce ops, not min"},
        FieldCase{"ReducescatterProduct",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_REDUCESCATTER);
                    r.set_op(v1::REDUCE_OP_PRODUCT);
                  },
                  kInvalid,
                  "reducescatter supports the sum and average reduce ops, not product"},
        FieldCase{"ReducescatterUnspecifiedOp",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_REDUCESCATTER);
                    r.set_op(v1::REDUCE_OP_UNSPECIFIED);
                  },
                  kInvalid, "unknown reduce op unspecified"},
        FieldCase{"AdasumScopeOfASum",
                  [](auto& r) { r.set_adasum_scope(v1::ADASUM_SCOPE_NODES); }, kInvalid,
                  "an Adasum scope applies to the adasum reduce op, not sum"},
        FieldCase{"UnknownAdasumScope",
                  [](auto& r) {
                    r.set_op(v1::REDUCE_OP_ADASUM);
                    r.set_adasum_scope(static_cast<v1::AdasumScope>(7));
                  },
                  kInvalid, "unknown Adasum scope 7"},
        FieldCase{"ReducescatterAdasum",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_REDUCESCATTER);
                    r.set_op(v1::REDUCE_OP_ADASUM);
                  },
                  kInvalid, "the adasum reduce op applies to allreduce, not reducescatter"},
        FieldCase{"ReducescatterBoolSum",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_REDUCESCATTER);
                    r.set_dtype(v1::DATA_TYPE_BOOL);
                    r.set_length(4);
                  },
                  kInvalid,
                  "reduce op sum is not defined for bool tensors (bool supports min and max)"},
        FieldCase{"ReducescatterNanPostscale",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_REDUCESCATTER);
                    r.set_postscale(std::numeric_limits<double>::quiet_NaN());
                  },
                  kInvalid, "postscale nan is not a finite number"},
        FieldCase{"AllgatherUnknownDtype",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_ALLGATHER);
                    r.set_dtype(static_cast<v1::DataType>(99));
                  },
                  kInvalid, "unknown dtype unknown(99)"},
        // Allgather, alltoall and reducescatter work on rows.
        FieldCase{"ScalarAllgather",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_ALLGATHER);
                    r.clear_shape();
                    r.set_length(4);
                  },
                  kInvalid, "allgather needs a tensor of at least one dimension (its rows)"},
        FieldCase{"ScalarAlltoall",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_ALLTOALL);
                    r.clear_shape();
                    r.set_length(4);
                  },
                  kInvalid, "alltoall needs a tensor of at least one dimension (its rows)"},
        FieldCase{"ScalarReducescatter",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_REDUCESCATTER);
                    r.clear_shape();
                    r.set_length(4);
                  },
                  kInvalid,
                  "reducescatter needs a tensor of at least one dimension (its rows)"},
        FieldCase{"AlltoallLengthStillChecked",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_ALLTOALL);
                    r.set_length(12);
                  },
                  kInvalid,
                  "length 12 does not match shape [2, 2] of float32 (4 elements of 4 bytes)"},
        FieldCase{"BroadcastOutsideTheArena",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_BROADCAST);
                    r.set_offset(kArena - 8);
                  },
                  kInvalid,
                  "offset 1048568 + length 16 lies outside the client's arena of 1048576 bytes"},
        // Splits: alltoall only, not negative, adding up to the first
        // dimension.
        FieldCase{"AllgatherSplits",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_ALLGATHER);
                    r.add_splits(2);
                  },
                  kInvalid, "splits apply only to alltoall"},
        FieldCase{"ReducescatterSplits",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_REDUCESCATTER);
                    r.add_splits(1);
                    r.add_splits(1);
                  },
                  kInvalid, "splits apply only to alltoall"},
        FieldCase{"NegativeSplit",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_ALLTOALL);
                    r.add_splits(3);
                    r.add_splits(-1);
                  },
                  kInvalid, "split -1 is negative"},
        FieldCase{"SplitsShort",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_ALLTOALL);
                    r.add_splits(1);
                    r.add_splits(0);
                  },
                  kInvalid, "the splits add up to 1 rows but the first dimension is 2"},
        FieldCase{"SplitsLong",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_ALLTOALL);
                    r.add_splits(2);
                    r.add_splits(1);
                    r.add_splits(0);
                  },
                  kInvalid, "the splits add up to 3 rows but the first dimension is 2"},
        FieldCase{"NegativeRoot",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_BROADCAST);
                    r.set_root_rank(-1);
                  },
                  kInvalid, "root rank -1 is negative"},
        // Groups: allreduce, allgather and reducescatter, of 1 to 65536
        // tensors.
        FieldCase{"GroupOfZero", [](auto& r) { r.set_group_id(9); }, kInvalid,
                  "group size 0 is outside [1, 65536]"},
        FieldCase{"GroupTooLarge",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_ALLGATHER);
                    r.set_group_id(9);
                    r.set_group_size(job::kMaxGroupSize + 1);
                  },
                  kInvalid, "group size 65537 is outside [1, 65536]"},
        FieldCase{"GroupedBroadcast",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_BROADCAST);
                    r.set_group_id(9);
                    r.set_group_size(2);
                  },
                  kInvalid, "only allreduce, allgather and reducescatter can be grouped, not "
                            "broadcast"},
        FieldCase{"GroupedAlltoall",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_ALLTOALL);
                    r.set_group_id(9);
                    r.set_group_size(2);
                  },
                  kInvalid,
                  "only allreduce, allgather and reducescatter can be grouped, not alltoall"},
        // An output in the arena: the daemon writes there, so only inside
        // the client's own arena, and only where it knows how.
        FieldCase{"OutputPastTheArena", [](auto& r) { r.set_output_offset(kArena - 8); },
                  kInvalid,
                  "output_offset 1048568 + length 16 lies outside the client's arena of 1048576 "
                  "bytes (the daemon writes a result only into the client's own arena)"},
        // In place or apart: an output partly over the input would overwrite
        // input that later pieces still read.
        FieldCase{"OutputPartlyOverTheInput",
                  [](auto& r) { r.set_output_offset(r.offset() + 4); }, kInvalid,
                  "output_offset 132 + length 16 partly overlaps the input at offset 128"
                  ": the result would overwrite input not yet reduced; an output over the input must "
                  "start where the input does (in place)"},
        FieldCase{"BroadcastOutputPartlyOverTheInput",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_BROADCAST);
                    r.set_op(v1::REDUCE_OP_UNSPECIFIED);
                    r.set_output_offset(r.offset() - 8);
                  },
                  kInvalid,
                  "output_offset 120 + length 16 partly overlaps the input at offset 128"
                  ": the result would overwrite input not yet reduced; an output over the input must "
                  "start where the input does (in place)"},
        FieldCase{"OutputOffsetThatOverflows",
                  [](auto& r) { r.set_output_offset(~uint64_t{0} - 7); }, kInvalid,
                  "output_offset 18446744073709551608 + length 16 lies outside the client's "
                  "arena of 1048576 bytes (the daemon writes a result only into the client's own "
                  "arena)"},
        FieldCase{"OutputOffsetOfAnAlltoall",
                  [](auto& r) {
                    r.set_collective(v1::COLLECTIVE_ALLTOALL);
                    r.set_op(v1::REDUCE_OP_UNSPECIFIED);
                    r.set_output_offset(0);
                  },
                  kInvalid,
                  "output_offset applies only to allreduce, broadcast, reducescatter, reduce, "
                  "scatter and receive, not to alltoall"}),
    [](const auto& param_info) { return param_info.param.label; });

TEST(RequestValidatorTest, AcceptsAnOutputAnywhereInTheArenaIncludingTheInput) {
  for (uint64_t at : {uint64_t{0}, uint64_t{128}, kArena - 16}) {
    v1::TensorRequest request = Valid();
    request.set_output_offset(at);
    EXPECT_TRUE(Validate(request).ok()) << "output at " << at;
    request.set_collective(v1::COLLECTIVE_BROADCAST);
    request.set_op(v1::REDUCE_OP_UNSPECIFIED);
    EXPECT_TRUE(Validate(request).ok()) << "broadcast output at " << at;
  }
  v1::TensorRequest empty = Valid();
  empty.set_shape(0, 0);
  empty.set_length(0);
  empty.set_output_offset(kArena);
  EXPECT_TRUE(Validate(empty).ok()) << "an empty output may sit at the arena's end";
}

TEST(RequestValidatorTest, EmptyArenaAdmitsOnlyEmptyTensors) {
  job::RequestLimits none = Limits();
  none.arena_bytes = 0;
  EXPECT_EQ(Validate(Valid(), none).code(), absl::StatusCode::kInvalidArgument);
  v1::TensorRequest empty = Valid();
  empty.set_shape(0, 0);
  empty.set_length(0);
  empty.set_offset(0);
  EXPECT_TRUE(Validate(empty, none).ok());
}

// --- CUDA tensors ------------------------------------------------------------------

// Valid() as a CUDA tensor: input and output in registered allocations.
TEST(RequestValidatorTest, AcceptsAdasumAllreducesOfFloatingPointHostTensors) {
  for (v1::DataType dtype : {v1::DATA_TYPE_FLOAT16, v1::DATA_TYPE_BFLOAT16, v1::DATA_TYPE_FLOAT32,
                             v1::DATA_TYPE_FLOAT64}) {
    v1::TensorRequest request = Valid();
    request.set_op(v1::REDUCE_OP_ADASUM);
    request.set_dtype(dtype);
    request.set_length(4 * ElementSize(dtype));
    request.set_prescale(0.5);
    request.set_postscale(2);
    EXPECT_TRUE(Validate(request).ok()) << dtype << ": " << Validate(request);
  }
  v1::TensorRequest boolean = Valid();
  boolean.set_op(v1::REDUCE_OP_ADASUM);
  boolean.set_dtype(v1::DATA_TYPE_BOOL);
  boolean.set_length(4);
  EXPECT_EQ(Reason(Validate(boolean)),
            "reduce op adasum is not defined for bool tensors (it supports float16, bfloat16, "
            "float32 and float64)");
}

v1::TensorRequest ValidCuda() {
  v1::TensorRequest request = Valid();
  request.set_offset(0);
  request.set_memory(v1::MEMORY_KIND_CUDA);
  request.mutable_device_input()->set_allocation_id(1);
  request.mutable_device_output()->set_allocation_id(2);
  request.mutable_device_output()->set_bytes(16);
  return request;
}

job::RequestLimits CudaLimits() {
  job::RequestLimits limits = Limits();
  limits.cuda = true;
  return limits;
}

TEST(RequestValidatorTest, RefusesAdasumOfCudaTensors) {
  v1::TensorRequest request = ValidCuda();
  request.set_op(v1::REDUCE_OP_ADASUM);
  const absl::Status status = Validate(request, CudaLimits());
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(Reason(status),
            "the adasum reduce op is implemented for host tensors only; copy a CUDA tensor to the "
            "host to combine it with Adasum");
}

TEST(RequestValidatorTest, AcceptsCudaTensorsOfEveryDataCollective) {
  EXPECT_TRUE(Validate(ValidCuda(), CudaLimits()).ok());
  for (v1::Collective collective : {v1::COLLECTIVE_ALLGATHER, v1::COLLECTIVE_BROADCAST,
                                    v1::COLLECTIVE_ALLTOALL, v1::COLLECTIVE_REDUCESCATTER}) {
    v1::TensorRequest request = ValidCuda();
    request.set_collective(collective);
    if (collective != v1::COLLECTIVE_REDUCESCATTER) request.clear_op();
    EXPECT_TRUE(Validate(request, CudaLimits()).ok()) << v1::Collective_Name(collective);
  }
  v1::TensorRequest big = ValidCuda();
  big.set_shape(0, 1 << 20);
  big.set_length(uint64_t{1} << 23);
  big.mutable_device_output()->set_bytes(uint64_t{1} << 23);
  EXPECT_TRUE(Validate(big, CudaLimits()).ok()) << "device memory is not bounded by the arena";
}

TEST(RequestValidatorTest, ADaemonWithoutCudaSaysSo) {
  const absl::Status status = Validate(ValidCuda(), Limits());
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(Reason(status),
            "CUDA tensors need a collectived built with CUDA and NCCL; this one was built "
            "without them");
}

TEST(RequestValidatorTest, CudaTensorsNameTheirInputAndOutput) {
  v1::TensorRequest no_input = ValidCuda();
  no_input.clear_device_input();
  EXPECT_EQ(Reason(Validate(no_input, CudaLimits())),
            "a CUDA tensor needs device_input in a registered CUDA allocation");
  v1::TensorRequest no_output = ValidCuda();
  no_output.clear_device_output();
  EXPECT_EQ(Reason(Validate(no_output, CudaLimits())),
            "a CUDA tensor needs device_output (allreduce writes each rank's result into it; it "
            "may be the input)");
  v1::TensorRequest small = ValidCuda();
  small.mutable_device_output()->set_bytes(15);
  EXPECT_EQ(Reason(Validate(small, CudaLimits())),
            "device_output holds 15 bytes; the allreduce result needs 16");
  v1::TensorRequest arena_output = ValidCuda();
  arena_output.set_output_offset(0);
  EXPECT_EQ(Reason(Validate(arena_output, CudaLimits())),
            "output_offset applies to host tensors; a CUDA tensor's output is device_output");
  v1::TensorRequest offset = ValidCuda();
  offset.set_offset(64);
  EXPECT_EQ(Reason(Validate(offset, CudaLimits())),
            "offset applies to host tensors; a CUDA tensor's input is device_input");
  v1::TensorRequest host = Valid();
  *host.mutable_device_output() = ValidCuda().device_output();
  EXPECT_EQ(Reason(Validate(host, CudaLimits())),
            "device_input and device_output apply to CUDA tensors");
  v1::TensorRequest empty = ValidCuda();  // an empty tensor names no allocation
  empty.set_shape(0, 0);
  empty.set_length(0);
  empty.clear_device_input();
  empty.clear_device_output();
  EXPECT_TRUE(Validate(empty, CudaLimits()).ok());
  v1::TensorRequest unbacked = ValidCuda();  // but an output with bytes needs one
  unbacked.mutable_device_output()->set_allocation_id(0);
  EXPECT_EQ(Reason(Validate(unbacked, CudaLimits())),
            "a CUDA tensor needs device_output (allreduce writes each rank's result into it; it "
            "may be the input)");
  v1::TensorRequest unknown = ValidCuda();
  unknown.set_memory(static_cast<v1::MemoryKind>(7));
  EXPECT_EQ(Reason(Validate(unknown, CudaLimits())), "unknown memory kind 7");
}

TEST(RequestValidatorTest, NcclReducesWhatItHasTypesFor) {
  for (v1::DataType dtype : {v1::DATA_TYPE_UINT16, v1::DATA_TYPE_INT16}) {
    v1::TensorRequest request = ValidCuda();
    request.set_dtype(dtype);
    request.set_length(8);
    request.mutable_device_output()->set_bytes(8);
    const absl::Status status = Validate(request, CudaLimits());
    EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(Reason(status), HasSubstr("NCCL cannot reduce"));
    request.set_collective(v1::COLLECTIVE_ALLGATHER);
    request.clear_op();
    EXPECT_TRUE(Validate(request, CudaLimits()).ok()) << "moving them is fine";
  }
  v1::TensorRequest flags = ValidCuda();
  flags.set_dtype(v1::DATA_TYPE_BOOL);
  flags.set_op(v1::REDUCE_OP_MAX);
  flags.set_length(4);
  EXPECT_TRUE(Validate(flags, CudaLimits()).ok()) << "bool min and max run as uint8";
}

TEST(RequestValidatorTest, ControlCollectivesCarryNoCudaTensor) {
  v1::TensorRequest barrier = Control(v1::COLLECTIVE_BARRIER);
  barrier.set_offset(0);
  barrier.set_memory(v1::MEMORY_KIND_CUDA);
  EXPECT_EQ(Reason(Validate(barrier, CudaLimits())), "barrier carries no tensor data");
}

// --- Reduce, gather, scatter -----------------------------------------------------------

// `Valid()` as a rooted collective at root 1.
v1::TensorRequest Rooted(v1::Collective collective) {
  v1::TensorRequest request = Valid();
  request.set_collective(collective);
  request.set_root_rank(1);
  if (collective != v1::COLLECTIVE_REDUCE) request.clear_op();
  if (collective == v1::COLLECTIVE_SCATTER) request.set_receive_rows(1);
  return request;
}

TEST(RequestValidatorTest, AcceptsRootedCollectivesOfHostTensors) {
  for (v1::Collective collective :
       {v1::COLLECTIVE_REDUCE, v1::COLLECTIVE_GATHER, v1::COLLECTIVE_SCATTER}) {
    EXPECT_TRUE(Validate(Rooted(collective)).ok()) << Validate(Rooted(collective));
  }
  for (v1::ReduceOp op : {v1::REDUCE_OP_SUM, v1::REDUCE_OP_AVERAGE, v1::REDUCE_OP_MIN,
                          v1::REDUCE_OP_MAX, v1::REDUCE_OP_PRODUCT}) {
    v1::TensorRequest reduce = Rooted(v1::COLLECTIVE_REDUCE);
    reduce.set_op(op);
    reduce.set_prescale(0.5);
    reduce.set_postscale(3);
    reduce.set_output_offset(128);  // in place
    EXPECT_TRUE(Validate(reduce).ok()) << Validate(reduce);
  }
  v1::TensorRequest empty = Rooted(v1::COLLECTIVE_SCATTER);
  empty.set_shape(0, 0);
  empty.set_length(0);
  empty.set_receive_rows(0);
  EXPECT_TRUE(Validate(empty).ok()) << "a rank may receive no rows of a scatter";
  empty.set_receive_rows(1000);
  empty.set_output_offset(kArena - 8000);
  EXPECT_TRUE(Validate(empty).ok()) << "an output of receive_rows rows at the arena's end";
}

TEST(RequestValidatorTest, RefusesWhatRootedCollectivesDoNotTake) {
  v1::TensorRequest adasum = Rooted(v1::COLLECTIVE_REDUCE);
  adasum.set_op(v1::REDUCE_OP_ADASUM);
  EXPECT_EQ(Reason(Validate(adasum)), "the adasum reduce op applies to allreduce, not reduce");

  v1::TensorRequest root = Rooted(v1::COLLECTIVE_GATHER);
  root.set_root_rank(-2);
  EXPECT_EQ(Reason(Validate(root)), "root rank -2 is negative");

  v1::TensorRequest scalar = Rooted(v1::COLLECTIVE_SCATTER);
  scalar.clear_shape();
  scalar.set_length(4);
  EXPECT_EQ(Reason(Validate(scalar)),
            "scatter needs a tensor of at least one dimension (its rows)");

  v1::TensorRequest negative = Rooted(v1::COLLECTIVE_SCATTER);
  negative.set_receive_rows(-1);
  EXPECT_EQ(Reason(Validate(negative)), "receive_rows -1 is negative");

  v1::TensorRequest huge = Rooted(v1::COLLECTIVE_SCATTER);
  huge.set_receive_rows(std::numeric_limits<int64_t>::max());
  EXPECT_EQ(Reason(Validate(huge)),
            "receive_rows 9223372036854775807 is more rows of shape [2, 2] than a tensor can hold");

  v1::TensorRequest rows_elsewhere = Rooted(v1::COLLECTIVE_GATHER);
  rows_elsewhere.set_receive_rows(2);
  EXPECT_EQ(Reason(Validate(rows_elsewhere)),
            "receive_rows applies only to scatter, not to gather");

  v1::TensorRequest outside = Rooted(v1::COLLECTIVE_SCATTER);
  outside.set_receive_rows(3);  // 24 bytes
  outside.set_output_offset(kArena - 16);
  EXPECT_EQ(Reason(Validate(outside)),
            "output_offset 1048560 + the bytes of receive_rows 24 lies outside the client's arena "
            "of 1048576 bytes (the daemon writes a result only into the client's own arena)");

  v1::TensorRequest gathered = Rooted(v1::COLLECTIVE_GATHER);
  gathered.set_output_offset(0);
  EXPECT_EQ(
      Reason(Validate(gathered)),
      "output_offset applies only to allreduce, broadcast, reducescatter, reduce, scatter and "
      "receive, not to gather");

  v1::TensorRequest grouped = Rooted(v1::COLLECTIVE_REDUCE);
  grouped.set_group_id(3);
  grouped.set_group_size(2);
  EXPECT_EQ(Reason(Validate(grouped)),
            "only allreduce, allgather and reducescatter can be grouped, not reduce");
}

TEST(RequestValidatorTest, AcceptsCudaTensorsOfRootedCollectives) {
  for (v1::Collective collective :
       {v1::COLLECTIVE_REDUCE, v1::COLLECTIVE_GATHER, v1::COLLECTIVE_SCATTER}) {
    v1::TensorRequest request = ValidCuda();
    request.set_collective(collective);
    request.set_root_rank(0);
    if (collective == v1::COLLECTIVE_SCATTER) request.set_receive_rows(2);
    if (collective != v1::COLLECTIVE_REDUCE) request.clear_op();
    EXPECT_TRUE(Validate(request, CudaLimits()).ok()) << CollectiveName(collective);
    // A rank that is not the root may have no output at all.
    request.clear_device_output();
    EXPECT_TRUE(Validate(request, CudaLimits()).ok()) << CollectiveName(collective);
  }
}

// A valid send of Valid()'s tensor to rank 3 with tag 5.
v1::TensorRequest ValidSend() {
  v1::TensorRequest request = Valid();
  request.set_collective(v1::COLLECTIVE_SEND);
  request.clear_op();
  request.set_peer_rank(3);
  request.set_tag(5);
  return request;
}

TEST(RequestValidatorTest, SendsAndReceivesNameAPeerAndATag) {
  EXPECT_TRUE(Validate(ValidSend()).ok());
  v1::TensorRequest receive = ValidSend();
  receive.set_collective(v1::COLLECTIVE_RECV);
  receive.set_offset(0);
  EXPECT_TRUE(Validate(receive).ok());
  // A receive reads no input: its length may exceed the arena, unless it
  // names an output there.
  receive.clear_shape();
  receive.add_shape(kArena);
  receive.set_length(4 * kArena);
  EXPECT_TRUE(Validate(receive).ok());
  receive.set_output_offset(0);
  EXPECT_THAT(Reason(Validate(receive)), HasSubstr("output_offset 0 + length"));
  receive.clear_output_offset();
  receive.set_offset(8);
  EXPECT_EQ(Reason(Validate(receive)),
            "a receive has no input: its offset must be 0 (its dtype and shape describe what it "
            "receives)");

  v1::TensorRequest negative = ValidSend();
  negative.set_peer_rank(-1);
  EXPECT_EQ(Reason(Validate(negative)), "peer rank -1 is negative");
  negative = ValidSend();
  negative.set_tag(-2);
  EXPECT_EQ(Reason(Validate(negative)), "tag -2 is negative");
  v1::TensorRequest output = ValidSend();
  output.set_output_offset(0);
  EXPECT_EQ(Reason(Validate(output)), "a send has no output: output_offset applies to receives");
  v1::TensorRequest grouped = ValidSend();
  grouped.set_group_id(1);
  grouped.set_group_size(1);
  EXPECT_THAT(Reason(Validate(grouped)), HasSubstr("can be grouped, not send"));
  v1::TensorRequest allreduce = Valid();
  allreduce.set_tag(1);
  EXPECT_EQ(Reason(Validate(allreduce)),
            "peer_rank and tag apply to send and receive, not to allreduce");
}

TEST(RequestValidatorTest, MessagesOfCudaTensorsNeedAReceiveOutputThatHoldsTheMessage) {
  v1::TensorRequest send = ValidCuda();
  send.set_collective(v1::COLLECTIVE_SEND);
  send.clear_op();
  send.clear_device_output();
  EXPECT_TRUE(Validate(send, CudaLimits()).ok());

  v1::TensorRequest receive = ValidCuda();
  receive.set_collective(v1::COLLECTIVE_RECV);
  receive.clear_op();
  EXPECT_TRUE(Validate(receive, CudaLimits()).ok());
  receive.mutable_device_output()->set_bytes(receive.length() - 1);
  EXPECT_EQ(Reason(Validate(receive, CudaLimits())),
            absl::StrCat("device_output holds ", receive.length() - 1,
                         " bytes; the recv result needs ", receive.length()));
  receive.clear_device_output();
  EXPECT_THAT(Reason(Validate(receive, CudaLimits())),
              HasSubstr("a CUDA tensor needs device_output (recv writes"));
}

}  // namespace
}  // namespace collective::daemon::job
