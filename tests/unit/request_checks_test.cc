// The checks libcollective and the daemon share (common/reduce_op_check.h,
// common/duplicate_name.h): every pair of reduce op and dtype against the
// rule, and the texts both sides return.
#include <gtest/gtest.h>

#include "common/dtype.h"
#include "common/duplicate_name.h"
#include "common/reduce_op_check.h"

namespace collective {
namespace {

constexpr v1::ReduceOp kOps[] = {v1::REDUCE_OP_SUM, v1::REDUCE_OP_AVERAGE, v1::REDUCE_OP_MIN,
                                 v1::REDUCE_OP_MAX, v1::REDUCE_OP_PRODUCT, v1::REDUCE_OP_ADASUM};

TEST(ReduceOpCheckTest, EveryOpOfEveryDtypeAgainstTheRule) {
  for (int d = v1::DATA_TYPE_UINT8; d <= v1::DATA_TYPE_BOOL; ++d) {
    const auto dtype = static_cast<v1::DataType>(d);
    for (v1::ReduceOp op : kOps) {
      const bool allowed = op == v1::REDUCE_OP_ADASUM ? IsFloatingPoint(dtype)
                           : dtype == v1::DATA_TYPE_BOOL
                               ? op == v1::REDUCE_OP_MIN || op == v1::REDUCE_OP_MAX
                               : true;
      const absl::Status status = CheckReduceOp(op, dtype, v1::ADASUM_SCOPE_RANKS);
      EXPECT_EQ(status.ok(), allowed) << ReduceOpName(op) << " of " << DataTypeName(dtype);
      if (!allowed) {
        EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
      }
    }
  }
}

TEST(ReduceOpCheckTest, TextsNameTheOpAndTheDtype) {
  EXPECT_EQ(
      CheckReduceOp(v1::REDUCE_OP_ADASUM, v1::DATA_TYPE_INT32, v1::ADASUM_SCOPE_RANKS).message(),
      "reduce op adasum is not defined for int32 tensors (it supports float16, bfloat16, "
      "float32 and float64)");
  EXPECT_EQ(
      CheckReduceOp(v1::REDUCE_OP_AVERAGE, v1::DATA_TYPE_BOOL, v1::ADASUM_SCOPE_RANKS).message(),
      "reduce op average is not defined for bool tensors (bool supports min and max)");
  EXPECT_EQ(
      CheckReduceOp(v1::REDUCE_OP_SUM, v1::DATA_TYPE_FLOAT32, v1::ADASUM_SCOPE_NODES).message(),
      "an Adasum scope applies to the adasum reduce op, not sum");
  EXPECT_TRUE(
      CheckReduceOp(v1::REDUCE_OP_ADASUM, v1::DATA_TYPE_FLOAT16, v1::ADASUM_SCOPE_NODES).ok());
}

TEST(DuplicateNameErrorTest, OneSentenceForTheClientAndTheDaemon) {
  const absl::Status client = DuplicateNameError("w", "this rank");
  EXPECT_EQ(client.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(client.message(),
            "tensor 'w' is already outstanding on this rank; a name can be submitted again only "
            "after its collective has completed");
  EXPECT_EQ(DuplicateNameError("w", "rank 3 (request 7)").message(),
            "tensor 'w' is already outstanding on rank 3 (request 7); a name can be submitted "
            "again only after its collective has completed");
}

}  // namespace
}  // namespace collective
