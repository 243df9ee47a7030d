// daemon/mismatch: agreement across ranks, and the exact Horovod-style
// message for every kind of disagreement, for every collective: what all
// share (collective, dtype, group), reductions (op, shape, scales), allgather
// and alltoall (every dimension but the first), broadcast (root, shape),
// reduce, gather and scatter (root, what they move; a scatter's rows) and
// process-set changes (the set).
#include "daemon/negotiation/mismatch.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "daemon/negotiation/response_cache.h"

namespace collective::daemon::negotiation {
namespace {

class MismatchTest : public ::testing::Test {
 protected:
  // A ready tensor 'layer1.weight' of `ranks` identical float32 [17, 3] sum
  // allreduces; global ranks are 10, 11, 12... so that messages must use the
  // rank, not the position.
  negotiation::ReadyTensor Tensor(int ranks) {
    negotiation::ReadyTensor tensor{.name = "layer1.weight", .submissions = {}};
    for (int i = 0; i < ranks; ++i) {
      auto client = std::make_unique<job::ClientRecord>();
      client->topology.set_rank(10 + i);
      negotiation::Submission submission;
      submission.client = client.get();
      submission.rank = submission.client->topology.rank();
      submission.request.set_request_id(100 + i);
      submission.request.set_name(tensor.name);
      submission.request.set_collective(v1::COLLECTIVE_ALLREDUCE);
      submission.request.set_op(v1::REDUCE_OP_SUM);
      submission.request.set_dtype(v1::DATA_TYPE_FLOAT32);
      submission.request.add_shape(17);
      submission.request.add_shape(3);
      submission.request.set_length(17 * 3 * 4);
      tensor.submissions.push_back(std::move(submission));
      clients_.push_back(std::move(client));
    }
    return tensor;
  }

  // CheckAgreement's message after editing rank `index` (position) of three
  // (after `all`, applied to every rank).
  std::string MessageAfter(size_t index, const std::function<void(v1::TensorRequest&)>& edit,
                           const std::function<void(v1::TensorRequest&)>& all = {}) {
    negotiation::ReadyTensor tensor = Tensor(3);
    if (all) {
      for (negotiation::Submission& submission : tensor.submissions) all(submission.request);
    }
    edit(tensor.submissions[index].request);
    const absl::Status status = negotiation::CheckAgreement(tensor);
    if (status.ok()) return "OK";
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    return std::string(status.message());
  }

  std::vector<std::unique_ptr<job::ClientRecord>> clients_;
};

TEST_F(MismatchTest, IdenticalRequestsAgree) {
  EXPECT_TRUE(negotiation::CheckAgreement(Tensor(1)).ok());
  EXPECT_TRUE(negotiation::CheckAgreement(Tensor(4)).ok());
}

TEST_F(MismatchTest, PerRankFieldsMayDiffer) {
  // Where each rank's data lies, and its request id, are its own business.
  EXPECT_EQ(MessageAfter(1,
                         [](auto& r) {
                           r.set_offset(4096);
                           r.set_request_id(1);
                         }),
            "OK");
}

TEST_F(MismatchTest, AbsentScaleEqualsOne) {
  EXPECT_EQ(MessageAfter(2,
                         [](auto& r) {
                           r.set_prescale(1.0);
                           r.set_postscale(1.0);
                         }),
            "OK");
}

TEST_F(MismatchTest, CollectiveMessage) {
  EXPECT_EQ(MessageAfter(2, [](auto& r) { r.set_collective(v1::COLLECTIVE_ALLGATHER); }),
            "Mismatched collective operations for 'layer1.weight': rank 10 sent allreduce, rank 12 "
            "sent allgather");
}

TEST_F(MismatchTest, DataTypeMessage) {
  EXPECT_EQ(MessageAfter(1, [](auto& r) { r.set_dtype(v1::DATA_TYPE_FLOAT64); }),
            "Mismatched data types for 'layer1.weight': rank 10 sent float32, rank 11 sent "
            "float64");
}

TEST_F(MismatchTest, ReduceOpMessage) {
  EXPECT_EQ(MessageAfter(2, [](auto& r) { r.set_op(v1::REDUCE_OP_MAX); }),
            "Mismatched reduce ops for 'layer1.weight': rank 10 sent sum, rank 12 sent max");
}

TEST_F(MismatchTest, ShapeMessage) {
  EXPECT_EQ(MessageAfter(2, [](auto& r) { r.set_shape(1, 4); }),
            "Mismatched allreduce tensor shapes for 'layer1.weight': rank 10 sent [17, 3], rank "
            "12 sent [17, 4]");
  EXPECT_EQ(MessageAfter(1,
                         [](auto& r) {
                           r.clear_shape();
                           r.add_shape(51);
                         }),
            "Mismatched allreduce tensor shapes for 'layer1.weight': rank 10 sent [17, 3], rank "
            "11 sent [51]")
      << "same element count, other shape";
  EXPECT_EQ(MessageAfter(1, [](auto& r) { r.add_shape(1); }),
            "Mismatched allreduce tensor shapes for 'layer1.weight': rank 10 sent [17, 3], rank "
            "11 sent [17, 3, 1]");
  EXPECT_EQ(MessageAfter(1, [](auto& r) { r.clear_shape(); }),
            "Mismatched allreduce tensor shapes for 'layer1.weight': rank 10 sent [17, 3], rank "
            "11 sent []");
}

TEST_F(MismatchTest, PrescaleMessage) {
  EXPECT_EQ(MessageAfter(1, [](auto& r) { r.set_prescale(0.5); }),
            "Mismatched prescale factors for 'layer1.weight': rank 10 sent 1, rank 11 sent 0.5");
}

TEST_F(MismatchTest, AdasumScopeMessage) {
  // A rank that passes a GPU tensor where the others pass host ones.
  EXPECT_EQ(MessageAfter(
                2, [](auto& r) { r.set_adasum_scope(v1::ADASUM_SCOPE_NODES); },
                [](auto& r) { r.set_op(v1::REDUCE_OP_ADASUM); }),
            "Mismatched Adasum scopes for 'layer1.weight': rank 10 sent ranks, rank 12 sent "
            "nodes (GPU tensors combine the nodes' sums, as Horovod's NCCL build does, host "
            "tensors every rank: pass tensors on the same device on every rank)");
}

TEST_F(MismatchTest, PostscaleMessage) {
  EXPECT_EQ(MessageAfter(2, [](auto& r) { r.set_postscale(0.25); }),
            "Mismatched postscale factors for 'layer1.weight': rank 10 sent 1, rank 12 sent 0.25");
}

TEST_F(MismatchTest, TheFirstRankIsTheReference) {
  // Rank 10 (position 0) differs from both others: it is named with the
  // first of them.
  EXPECT_EQ(MessageAfter(0, [](auto& r) { r.set_dtype(v1::DATA_TYPE_INT32); }),
            "Mismatched data types for 'layer1.weight': rank 10 sent int32, rank 11 sent float32");
}

TEST_F(MismatchTest, FieldsAreCheckedInAFixedOrder) {
  // Several differences: collective, then dtype, op, shape, prescale,
  // postscale.
  EXPECT_EQ(MessageAfter(1,
                         [](auto& r) {
                           r.set_postscale(3);
                           r.set_op(v1::REDUCE_OP_MIN);
                           r.set_dtype(v1::DATA_TYPE_INT8);
                         }),
            "Mismatched data types for 'layer1.weight': rank 10 sent float32, rank 11 sent int8");
  EXPECT_EQ(MessageAfter(1,
                         [](auto& r) {
                           r.set_postscale(3);
                           r.set_shape(0, 1);
                         }),
            "Mismatched allreduce tensor shapes for 'layer1.weight': rank 10 sent [17, 3], rank "
            "11 sent [1, 3]");
}

// Horovod refuses a tensor that is on the CPU on some ranks and on a GPU on
// others; so does the daemon, before comparing anything else but the
// collective.
TEST_F(MismatchTest, CpuAndGpuTensorsMessage) {
  const auto on_gpu = [](v1::TensorRequest& r) { r.set_memory(v1::MEMORY_KIND_CUDA); };
  EXPECT_EQ(MessageAfter(2, on_gpu),
            "Mismatched CPU and GPU tensors for 'layer1.weight': rank 10 sent a CPU tensor, rank "
            "12 sent a GPU tensor");
  EXPECT_EQ(MessageAfter(
                0, [](v1::TensorRequest& r) { r.set_memory(v1::MEMORY_KIND_HOST); }, on_gpu),
            "Mismatched CPU and GPU tensors for 'layer1.weight': rank 10 sent a CPU tensor, rank "
            "11 sent a GPU tensor");
  EXPECT_EQ(MessageAfter(
                1,
                [](v1::TensorRequest& r) {
                  r.set_memory(v1::MEMORY_KIND_HOST);
                  r.set_dtype(v1::DATA_TYPE_INT8);
                },
                on_gpu),
            "Mismatched CPU and GPU tensors for 'layer1.weight': rank 10 sent a GPU tensor, rank "
            "11 sent a CPU tensor")
      << "the device is compared before the dtype";
  EXPECT_EQ(MessageAfter(
                1, [](v1::TensorRequest&) {}, on_gpu),
            "OK")
      << "all on GPUs";
}

// --- Other collectives -------------------------------------------------------------

using ::testing::HasSubstr;
using ::testing::Not;

using Edit = std::function<void(v1::TensorRequest&)>;

Edit As(v1::Collective collective) {
  return [collective](v1::TensorRequest& r) { r.set_collective(collective); };
}

// Control collectives: no data.
Edit AsControl(v1::Collective collective) {
  return [collective](v1::TensorRequest& r) {
    r.set_collective(collective);
    r.clear_shape();
    r.set_length(0);
    r.set_dtype(v1::DATA_TYPE_UNSPECIFIED);
    r.set_op(v1::REDUCE_OP_UNSPECIFIED);
  };
}

TEST_F(MismatchTest, AllgatherAndAlltoallFirstDimensionsMayDiffer) {
  for (v1::Collective collective : {v1::COLLECTIVE_ALLGATHER, v1::COLLECTIVE_ALLTOALL}) {
    EXPECT_EQ(MessageAfter(
                  1, [](auto& r) { r.set_shape(0, 5); }, As(collective)),
              "OK");
    EXPECT_EQ(MessageAfter(
                  2, [](auto& r) { r.set_shape(0, 0); }, As(collective)),
              "OK");
  }
  // Alltoall: each rank splits its own rows.
  EXPECT_EQ(MessageAfter(
                1,
                [](auto& r) {
                  r.add_splits(17);
                  r.add_splits(0);
                  r.add_splits(0);
                },
                As(v1::COLLECTIVE_ALLTOALL)),
            "OK");
}

TEST_F(MismatchTest, AllgatherAndAlltoallTrailingDimensionsMustMatch) {
  EXPECT_EQ(MessageAfter(
                1, [](auto& r) { r.set_shape(1, 4); }, As(v1::COLLECTIVE_ALLGATHER)),
            "Mismatched allgather tensor shapes for 'layer1.weight': rank 10 sent [17, 3], rank "
            "11 sent [17, 4] (every dimension but the first must match)");
  EXPECT_EQ(MessageAfter(
                2,
                [](auto& r) {
                  r.set_shape(0, 2);
                  r.set_shape(1, 4);
                },
                As(v1::COLLECTIVE_ALLTOALL)),
            "Mismatched alltoall tensor shapes for 'layer1.weight': rank 10 sent [17, 3], rank "
            "12 sent [2, 4] (every dimension but the first must match)");
  EXPECT_EQ(MessageAfter(
                1, [](auto& r) { r.add_shape(1); }, As(v1::COLLECTIVE_ALLGATHER)),
            "Mismatched allgather tensor shapes for 'layer1.weight': rank 10 sent [17, 3], rank "
            "11 sent [17, 3, 1] (every dimension but the first must match)")
      << "the number of dimensions too";
  EXPECT_EQ(MessageAfter(
                1,
                [](auto& r) {
                  r.clear_shape();
                  r.add_shape(17);
                },
                As(v1::COLLECTIVE_ALLTOALL)),
            "Mismatched alltoall tensor shapes for 'layer1.weight': rank 10 sent [17, 3], rank "
            "11 sent [17] (every dimension but the first must match)");
}

TEST_F(MismatchTest, DataMovementIgnoresOpAndScales) {
  for (v1::Collective collective :
       {v1::COLLECTIVE_ALLGATHER, v1::COLLECTIVE_ALLTOALL, v1::COLLECTIVE_BROADCAST}) {
    EXPECT_EQ(MessageAfter(
                  1,
                  [](auto& r) {
                    r.set_op(v1::REDUCE_OP_MAX);
                    r.set_prescale(1);
                  },
                  As(collective)),
              "OK")
        << collective;
  }
}

TEST_F(MismatchTest, BroadcastRootMessage) {
  const Edit broadcast = [](auto& r) {
    r.set_collective(v1::COLLECTIVE_BROADCAST);
    r.set_root_rank(0);
  };
  EXPECT_EQ(MessageAfter(
                2, [](auto& r) { r.set_root_rank(2); }, broadcast),
            "Mismatched broadcast root ranks for 'layer1.weight': rank 10 sent 0, rank 12 sent 2");
}

TEST_F(MismatchTest, BroadcastShapeMessage) {
  EXPECT_EQ(MessageAfter(
                1, [](auto& r) { r.set_shape(0, 16); }, As(v1::COLLECTIVE_BROADCAST)),
            "Mismatched broadcast tensor shapes for 'layer1.weight': rank 10 sent [17, 3], rank "
            "11 sent [16, 3]")
      << "the first dimension counts too";
  EXPECT_EQ(MessageAfter(
                1,
                [](auto& r) {
                  r.set_shape(0, 16);
                  r.set_root_rank(1);
                },
                As(v1::COLLECTIVE_BROADCAST)),
            "Mismatched broadcast root ranks for 'layer1.weight': rank 10 sent 0, rank 11 sent 1")
      << "the root before the shape";
}

TEST_F(MismatchTest, ReducescatterAgreesOnOpShapeAndScales) {
  const Edit reducescatter = As(v1::COLLECTIVE_REDUCESCATTER);
  EXPECT_EQ(MessageAfter(
                1, [](auto& r) { r.set_op(v1::REDUCE_OP_AVERAGE); }, reducescatter),
            "Mismatched reduce ops for 'layer1.weight': rank 10 sent sum, rank 11 sent average");
  EXPECT_EQ(MessageAfter(
                2, [](auto& r) { r.set_shape(0, 18); }, reducescatter),
            "Mismatched reducescatter tensor shapes for 'layer1.weight': rank 10 sent [17, 3], "
            "rank 12 sent [18, 3]")
      << "unlike allgather, the first dimension must match";
  EXPECT_EQ(MessageAfter(
                1, [](auto& r) { r.set_prescale(3); }, reducescatter),
            "Mismatched prescale factors for 'layer1.weight': rank 10 sent 1, rank 11 sent 3");
  EXPECT_EQ(MessageAfter(
                1, [](auto& r) { r.set_postscale(0.5); }, reducescatter),
            "Mismatched postscale factors for 'layer1.weight': rank 10 sent 1, rank 11 sent 0.5");
  EXPECT_EQ(MessageAfter(
                1, [](auto& r) { r.set_offset(640); }, reducescatter),
            "OK");
}

TEST_F(MismatchTest, GroupMessages) {
  const Edit grouped = [](auto& r) {
    r.set_group_id(5);
    r.set_group_size(2);
  };
  EXPECT_EQ(MessageAfter(1, grouped),
            "Mismatched groups for 'layer1.weight': rank 10 sent it alone, rank 11 sent it in a "
            "group of 2 tensors");
  EXPECT_EQ(MessageAfter(0, grouped),
            "Mismatched groups for 'layer1.weight': rank 10 sent it in a group of 2 tensors, "
            "rank 11 sent it alone");
  EXPECT_EQ(MessageAfter(
                2, [](auto& r) { r.set_group_size(3); }, grouped),
            "Mismatched groups for 'layer1.weight': rank 10 sent it in a group of 2 tensors, "
            "rank 12 sent it in a group of 3 tensors");
  EXPECT_EQ(MessageAfter(
                1, [](auto& r) { r.set_group_size(1); }, grouped),
            "Mismatched groups for 'layer1.weight': rank 10 sent it in a group of 2 tensors, "
            "rank 11 sent it in a group of 1 tensor");
  EXPECT_EQ(MessageAfter(
                2, [](auto& r) { r.set_group_id(99); }, grouped),
            "OK")
      << "group ids are each client's own";
  EXPECT_EQ(MessageAfter(
                1,
                [](auto& r) {
                  r.set_group_size(3);
                  r.set_shape(0, 1);
                },
                grouped),
            "Mismatched groups for 'layer1.weight': rank 10 sent it in a group of 2 tensors, "
            "rank 11 sent it in a group of 3 tensors")
      << "the group before the collective's own fields";
  EXPECT_EQ(MessageAfter(
                1,
                [](auto& r) {
                  r.set_group_size(3);
                  r.set_dtype(v1::DATA_TYPE_INT32);
                },
                grouped),
            "Mismatched data types for 'layer1.weight': rank 10 sent float32, rank 11 sent int32")
      << "the dtype before the group";
}

// Issue 15: "Mismatched groups for 'c0': rank 0 sent it alone, rank 2 sent it
// alone" named no difference. Without a group id a request is alone, whatever
// its group size says (the validator lets the size through: it means
// nothing), so sizes without ids must neither differ nor be compared.
TEST_F(MismatchTest, GroupSizeWithoutAGroupIdIsAlone) {
  EXPECT_EQ(MessageAfter(2, [](auto& r) { r.set_group_size(3); }), "OK");
  EXPECT_EQ(MessageAfter(
                0, [](auto& r) { r.set_group_size(0); }, [](auto& r) { r.set_group_size(7); }),
            "OK");
  EXPECT_EQ(MessageAfter(
                1,
                [](auto& r) {
                  r.set_group_id(4);
                  r.set_group_size(3);
                },
                [](auto& r) { r.set_group_size(3); }),
            "Mismatched groups for 'layer1.weight': rank 10 sent it alone, rank 11 sent it in a "
            "group of 3 tensors");
}

// Across nodes node 0 checks the requests a node announced in full with
// those of a node that announced a cache bit, which are cached forms: a
// grouped tensor's cached form must still be grouped, and only its group.
TEST_F(MismatchTest, CachedFormsKeepTheirGroup) {
  negotiation::ReadyTensor tensor = Tensor(3);
  for (negotiation::Submission& submission : tensor.submissions) {
    submission.request.set_group_id(20 + submission.rank);
    submission.request.set_group_size(2);
  }
  tensor.submissions[0].request = CacheForm(tensor.submissions[0].request);
  EXPECT_TRUE(CheckAgreement(tensor).ok()) << CheckAgreement(tensor);
  tensor.submissions[2].request.set_group_id(0);
  EXPECT_EQ(std::string(CheckAgreement(tensor).message()),
            "Mismatched groups for 'layer1.weight': rank 10 sent it in a group of 2 tensors, "
            "rank 12 sent it alone");
  EXPECT_EQ(CacheForm(tensor.submissions[2].request).group_size(), 0u)
      << "alone, the size means nothing";
}

// Whatever differs, a message names two different ranks and two different
// values.
TEST_F(MismatchTest, GroupMessagesNameTwoRanksAndTwoValues) {
  const std::vector<Edit> edits = {
      [](auto& r) { r.set_group_size(3); },
      [](auto& r) {
        r.set_group_id(8);
        r.set_group_size(3);
      },
      [](auto& r) {
        r.set_group_id(8);
        r.set_group_size(1);
      },
      [](auto& r) {
        r.set_group_id(0);
        r.set_group_size(2);
      },
  };
  const std::vector<Edit> alls = {
      [](auto&) {},
      [](auto& r) {
        r.set_group_id(5);
        r.set_group_size(2);
      },
      [](auto& r) { r.set_group_size(2); },
  };
  for (size_t a = 0; a < alls.size(); ++a) {
    for (size_t e = 0; e < edits.size(); ++e) {
      for (size_t index = 0; index < 3; ++index) {
        const std::string message = MessageAfter(index, edits[e], alls[a]);
        if (message == "OK") continue;
        SCOPED_TRACE(message);
        const std::string prefix = "Mismatched groups for 'layer1.weight': rank ";
        ASSERT_EQ(message.rfind(prefix, 0), 0u);
        const size_t comma = message.find(", rank ");
        ASSERT_NE(comma, std::string::npos);
        const std::string first = message.substr(prefix.size(), comma - prefix.size());
        const std::string second = message.substr(comma + 7);
        EXPECT_NE(first.substr(0, first.find(' ')), second.substr(0, second.find(' ')))
            << "the same rank twice";
        EXPECT_NE(first.substr(first.find(' ')), second.substr(second.find(' ')))
            << "the same value twice";
      }
    }
  }
}

TEST_F(MismatchTest, AddProcessSetComparesTheSetNotTheOrder) {
  const Edit add = [](auto& r) {
    AsControl(v1::COLLECTIVE_ADD_PROCESS_SET)(r);
    r.add_process_set_ranks(2);
    r.add_process_set_ranks(0);
  };
  EXPECT_EQ(MessageAfter(
                1,
                [](auto& r) {
                  r.clear_process_set_ranks();
                  r.add_process_set_ranks(0);
                  r.add_process_set_ranks(2);
                },
                add),
            "OK");
  EXPECT_EQ(MessageAfter(
                1,
                [](auto& r) {
                  r.clear_process_set_ranks();
                  r.add_process_set_ranks(1);
                  r.add_process_set_ranks(0);
                },
                add),
            "Mismatched process sets to add for 'layer1.weight': rank 10 sent [0, 2], rank 11 "
            "sent [0, 1]");
  EXPECT_EQ(MessageAfter(
                2, [](auto& r) { r.add_process_set_ranks(3); }, add),
            "Mismatched process sets to add for 'layer1.weight': rank 10 sent [0, 2], rank 12 "
            "sent [0, 2, 3]");
}

TEST_F(MismatchTest, RemoveProcessSetComparesTheTarget) {
  const Edit remove = [](auto& r) {
    AsControl(v1::COLLECTIVE_REMOVE_PROCESS_SET)(r);
    r.set_target_process_set_id(1);
  };
  EXPECT_EQ(MessageAfter(
                1, [](auto&) {}, remove),
            "OK");
  EXPECT_EQ(MessageAfter(
                2, [](auto& r) { r.set_target_process_set_id(2); }, remove),
            "Mismatched process sets to remove for 'layer1.weight': rank 10 sent 1, rank 12 sent "
            "2");
}

TEST_F(MismatchTest, ControlCollectivesAgreeOnTheCollective) {
  EXPECT_EQ(MessageAfter(
                1, [](auto&) {}, AsControl(v1::COLLECTIVE_BARRIER)),
            "OK");
  EXPECT_EQ(MessageAfter(1, AsControl(v1::COLLECTIVE_JOIN), AsControl(v1::COLLECTIVE_BARRIER)),
            "Mismatched collective operations for 'layer1.weight': rank 10 sent barrier, rank 11 "
            "sent join");
}

TEST_F(MismatchTest, EveryCollectiveIsNamed) {
  // The collective mismatch names both collectives, the process-set changes
  // included.
  for (v1::Collective collective :
       {v1::COLLECTIVE_ADD_PROCESS_SET, v1::COLLECTIVE_REMOVE_PROCESS_SET}) {
    const std::string message =
        MessageAfter(1, AsControl(collective), AsControl(v1::COLLECTIVE_BARRIER));
    EXPECT_THAT(message, HasSubstr("Mismatched collective operations for 'layer1.weight': rank "
                                   "10 sent barrier, rank 11 sent "));
    EXPECT_THAT(message, Not(HasSubstr("unknown"))) << collective;
  }
}

TEST_F(MismatchTest, JoinedRanksAreLeftOut) {
  // Ranks 11 and 12 have joined: the tensor holds only rank 10 and 13's
  // submissions, which are compared with each other.
  negotiation::ReadyTensor tensor = Tensor(4);
  tensor.submissions.erase(tensor.submissions.begin() + 1, tensor.submissions.begin() + 3);
  EXPECT_TRUE(negotiation::CheckAgreement(tensor).ok());
  tensor.submissions[1].request.set_shape(1, 1);
  EXPECT_EQ(negotiation::CheckAgreement(tensor).message(),
            "Mismatched allreduce tensor shapes for 'layer1.weight': rank 10 sent [17, 3], rank "
            "13 sent [17, 1]");
}

// --- Reduce, gather, scatter ----------------------------------------------------------

// A rooted collective of three ranks (set ranks 0, 1, 2) at root 1.
Edit Rooted(v1::Collective collective) {
  return [collective](v1::TensorRequest& r) {
    r.set_collective(collective);
    r.set_root_rank(1);
  };
}

TEST_F(MismatchTest, RootedCollectivesAgreeOnTheRoot) {
  for (v1::Collective collective :
       {v1::COLLECTIVE_REDUCE, v1::COLLECTIVE_GATHER, v1::COLLECTIVE_SCATTER}) {
    EXPECT_EQ(MessageAfter(
                  2, [](auto& r) { r.set_root_rank(0); }, Rooted(collective)),
              absl::StrCat("Mismatched ", CollectiveName(collective),
                           " root ranks for 'layer1.weight': rank 10 sent 1, rank 12 sent 0"));
    EXPECT_EQ(MessageAfter(
                  1, [](auto& r) { r.set_dtype(v1::DATA_TYPE_INT32); }, Rooted(collective)),
              "Mismatched data types for 'layer1.weight': rank 10 sent float32, rank 11 sent "
              "int32");
  }
}

TEST_F(MismatchTest, ReduceAgreesOnOpShapeAndScales) {
  EXPECT_EQ(MessageAfter(
                1, [](auto& r) { r.set_shape(0, 16); }, Rooted(v1::COLLECTIVE_REDUCE)),
            "Mismatched reduce tensor shapes for 'layer1.weight': rank 10 sent [17, 3], rank 11 "
            "sent [16, 3]");
  EXPECT_EQ(MessageAfter(
                2, [](auto& r) { r.set_op(v1::REDUCE_OP_MAX); }, Rooted(v1::COLLECTIVE_REDUCE)),
            "Mismatched reduce ops for 'layer1.weight': rank 10 sent sum, rank 12 sent max");
  EXPECT_EQ(MessageAfter(
                1, [](auto& r) { r.set_postscale(2); }, Rooted(v1::COLLECTIVE_REDUCE)),
            "Mismatched postscale factors for 'layer1.weight': rank 10 sent 1, rank 11 sent 2");
}

TEST_F(MismatchTest, GatherAndScatterAgreeOnTrailingDimensionsOnly) {
  for (v1::Collective collective : {v1::COLLECTIVE_GATHER, v1::COLLECTIVE_SCATTER}) {
    const Edit rows = Rooted(collective);
    EXPECT_EQ(MessageAfter(
                  2, [](auto& r) { r.set_shape(0, 0); }, rows),
              "OK")
        << "first dimensions may differ";
    EXPECT_EQ(MessageAfter(
                  2, [](auto& r) { r.set_shape(1, 4); }, rows),
              absl::StrCat("Mismatched ", CollectiveName(collective),
                           " tensor shapes for 'layer1.weight': rank 10 sent [17, 3], rank 12 "
                           "sent [17, 4] (every dimension but the first must match)"));
  }
}

TEST_F(MismatchTest, ScatterRowsMustAddUpToTheRootsFirstDimension) {
  negotiation::ReadyTensor tensor = Tensor(3);
  tensor.set_size = 3;
  const int64_t rows[] = {5, 2, 9};
  for (int32_t i = 0; i < 3; ++i) {
    v1::TensorRequest& request = tensor.submissions[i].request;
    tensor.submissions[i].set_rank = i;
    Rooted(v1::COLLECTIVE_SCATTER)(request);
    request.set_receive_rows(rows[i]);
    if (i != 1) request.set_shape(0, 0);
  }
  EXPECT_EQ(negotiation::CheckAgreement(tensor).message(),
            "Mismatched scatter rows for 'layer1.weight': the ranks of process set 0 ask for [5, "
            "2, 9] rows, 16 in all, but root rank 11 sent 17 rows; the rows every rank receives "
            "must add up to the root's first dimension");
  tensor.submissions[2].request.set_receive_rows(10);
  EXPECT_TRUE(negotiation::CheckAgreement(tensor).ok()) << negotiation::CheckAgreement(tensor);
  tensor.submissions[0].request.set_receive_rows(INT64_MAX);
  EXPECT_THAT(std::string(negotiation::CheckAgreement(tensor).message()),
              HasSubstr("more than a tensor holds in all, but root rank 11 sent 17 rows"));
}

}  // namespace
}  // namespace collective::daemon::negotiation
