// Broadcast, allgather, alltoall, gather, scatter and point-to-point
// messages on CUDA devices (see device_ops.h): the collectives that move
// data without reducing it.
#include <numeric>

#include "common/status_macros.h"
#include "daemon/exec/ops/collective_op.h"
#include "daemon/exec/ops/ops.h"
#include "daemon/gpu/device_ops.h"

namespace collective::daemon::gpu {
namespace {

// Where each device receives a tensor: its first member's output, or, on a
// device without a member, a scratch buffer (it still takes part in NCCL).
absl::StatusOr<std::vector<std::byte*>> Receivers(DeviceIssue& issue, const DeviceTensor& tensor,
                                                  uint64_t bytes) {
  std::vector<std::byte*> receivers(static_cast<size_t>(issue.devices()), nullptr);
  for (const DeviceMember& member : tensor.members) {
    std::byte*& receiver = receivers[static_cast<size_t>(member.device)];
    if (receiver == nullptr) receiver = member.output;
  }
  for (int d = 0; d < issue.devices(); ++d) {
    if (receivers[d] == nullptr) {
      ASSIGN_OR_RETURN(receivers[d], issue.Scratch(d, bytes));
    }
  }
  return receivers;
}

// Copies each device's received `bytes` to its other members' outputs.
absl::Status ShareWithinDevices(DeviceIssue& issue, const DeviceTensor& tensor,
                                const std::vector<std::byte*>& receivers, uint64_t bytes) {
  std::vector<std::vector<DeviceCopy>> copies(static_cast<size_t>(issue.devices()));
  for (const DeviceMember& member : tensor.members) {
    std::byte* receiver = receivers[static_cast<size_t>(member.device)];
    if (member.output != receiver) {
      copies[static_cast<size_t>(member.device)].push_back({receiver, member.output, bytes});
    }
  }
  for (int d = 0; d < issue.devices(); ++d) RETURN_IF_ERROR(issue.Copy(d, copies[d]));
  return absl::OkStatus();
}

// `bytes` from `source` (on the device at index `root`) to `offset` of every
// device's receiver, as one ncclBroadcast per device.
absl::Status BroadcastBlock(const DeviceIssue& issue, const std::vector<std::byte*>& receivers,
                            int root, const std::byte* source, uint64_t offset, uint64_t bytes) {
  for (int d = 0; d < issue.devices(); ++d) {
    RETURN_IF_ERROR(issue.backend().Broadcast(issue.comm().id, issue.ordinal(d),
                                              d == root ? source : nullptr, receivers[d] + offset,
                                              bytes, issue.rank(root)));
  }
  return absl::OkStatus();
}

// A batch of data collectives: each tensor's receivers, the group of NCCL
// calls for all of them, then the copies within devices.
template <class TotalBytes, class Calls>
absl::Status Gathered(DeviceIssue& issue, std::span<const DeviceTensor> tensors,
                      TotalBytes total_bytes, Calls calls) {
  std::vector<std::vector<std::byte*>> receivers;
  for (const DeviceTensor& tensor : tensors) {
    ASSIGN_OR_RETURN(std::vector<std::byte*> receiving,
                     Receivers(issue, tensor, total_bytes(tensor)));
    receivers.push_back(std::move(receiving));
  }
  const auto all_calls = [&]() -> absl::Status {
    for (size_t t = 0; t < tensors.size(); ++t) RETURN_IF_ERROR(calls(tensors[t], receivers[t]));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(issue.Grouped(all_calls));
  for (size_t t = 0; t < tensors.size(); ++t) {
    RETURN_IF_ERROR(ShareWithinDevices(issue, tensors[t], receivers[t], total_bytes(tensors[t])));
  }
  return absl::OkStatus();
}

uint64_t GatheredBytes(const DeviceTensor& tensor) {
  uint64_t bytes = 0;
  for (const negotiation::Submission& submission : tensor.tensor->submissions) {
    bytes += submission.request.length();
  }
  return bytes;
}

// One block of a collective that moves bytes from one rank to another.
struct Block {
  const DeviceMember* sender;
  const DeviceMember* receiver;
  const std::byte* source;
  std::byte* destination;
  uint64_t bytes;
};

// Moves every block once: a copy where both ranks share a device, else
// NCCL send/recv between the two devices, all in one group.
absl::Status MoveBlocks(DeviceIssue& issue, const std::vector<Block>& blocks) {
  std::vector<const Block*> between;
  std::vector<std::vector<DeviceCopy>> copies(static_cast<size_t>(issue.devices()));
  for (const Block& block : blocks) {
    // An empty block, or a rank's own rows already where they belong (a
    // gather's root whose input lies at its place in the output).
    if (block.bytes == 0 || block.source == block.destination) continue;
    if (block.sender->device == block.receiver->device) {
      copies[static_cast<size_t>(block.receiver->device)].push_back(
          {block.source, block.destination, block.bytes});
    } else {
      between.push_back(&block);
    }
  }
  for (int d = 0; d < issue.devices(); ++d) RETURN_IF_ERROR(issue.Copy(d, copies[d]));
  if (between.empty()) return absl::OkStatus();
  DeviceBackend& backend = issue.backend();
  // Sends and receives between two devices pair up in the order they are
  // posted, which is the same on both sides.
  const auto exchange = [&]() -> absl::Status {
    for (const Block* block : between) {
      RETURN_IF_ERROR(backend.Send(issue.comm().id, issue.ordinal(block->sender->device),
                                   block->source, block->bytes,
                                   issue.rank(block->receiver->device)));
      RETURN_IF_ERROR(backend.Recv(issue.comm().id, issue.ordinal(block->receiver->device),
                                   block->destination, block->bytes,
                                   issue.rank(block->sender->device)));
    }
    return absl::OkStatus();
  };
  return issue.Grouped(exchange);
}

}  // namespace

absl::Status IssueBroadcast(DeviceIssue& issue, std::span<const DeviceTensor> tensors) {
  return Gathered(issue, tensors, Length,
                  [&](const DeviceTensor& tensor, const std::vector<std::byte*>& receivers) {
                    if (Length(tensor) == 0) return absl::OkStatus();
                    // Without joined ranks, members are indexed by set rank.
                    const DeviceMember& root =
                        tensor.members[static_cast<size_t>(tensor.tensor->request().root_rank())];
                    return BroadcastBlock(issue, receivers, root.device, root.input, 0,
                                          Length(tensor));
                  });
}

absl::Status IssueAllgather(DeviceIssue& issue, std::span<const DeviceTensor> tensors) {
  return Gathered(issue, tensors, GatheredBytes,
                  [&](const DeviceTensor& tensor, const std::vector<std::byte*>& receivers) {
                    uint64_t offset = 0;
                    for (size_t i = 0; i < tensor.members.size(); ++i) {
                      const uint64_t bytes = tensor.tensor->submissions[i].request.length();
                      if (bytes > 0) {
                        const DeviceMember& member = tensor.members[i];
                        RETURN_IF_ERROR(BroadcastBlock(issue, receivers, member.device,
                                                       member.input, offset, bytes));
                      }
                      offset += bytes;
                    }
                    return absl::OkStatus();
                  });
}

absl::Status IssueAlltoall(DeviceIssue& issue, std::span<const DeviceTensor> tensors) {
  std::vector<Block> blocks;
  for (const DeviceTensor& tensor : tensors) {
    const auto splits = exec::ops::AlltoallSplits(*tensor.tensor);
    const uint64_t row_bytes = exec::ops::RowBytes(tensor.tensor->request());
    // Without joined ranks, members are indexed by set rank.
    for (size_t j = 0; j < tensor.members.size(); ++j) {
      uint64_t received = 0;
      for (size_t r = 0; r < tensor.members.size(); ++r) {
        const std::vector<int64_t>& sent = splits[r];
        const uint64_t skip = static_cast<uint64_t>(std::accumulate(
            sent.begin(), sent.begin() + static_cast<std::ptrdiff_t>(j), int64_t{0}));
        const uint64_t bytes = static_cast<uint64_t>(sent[j]) * row_bytes;
        blocks.push_back({&tensor.members[r], &tensor.members[j],
                          tensor.members[r].input + skip * row_bytes,
                          tensor.members[j].output + received, bytes});
        received += bytes;
      }
    }
  }
  return MoveBlocks(issue, blocks);
}

absl::Status IssueGather(DeviceIssue& issue, std::span<const DeviceTensor> tensors) {
  std::vector<Block> blocks;
  for (const DeviceTensor& tensor : tensors) {
    // Without joined ranks (CheckRoot), members are indexed by set rank.
    const DeviceMember& root =
        tensor.members[static_cast<size_t>(tensor.tensor->request().root_rank())];
    uint64_t offset = 0;
    for (size_t r = 0; r < tensor.members.size(); ++r) {
      const uint64_t bytes = tensor.tensor->submissions[r].request.length();
      blocks.push_back(
          {&tensor.members[r], &root, tensor.members[r].input, root.output + offset, bytes});
      offset += bytes;
    }
  }
  return MoveBlocks(issue, blocks);
}

absl::Status IssueScatter(DeviceIssue& issue, std::span<const DeviceTensor> tensors) {
  std::vector<Block> blocks;
  for (const DeviceTensor& tensor : tensors) {
    const DeviceMember& root =
        tensor.members[static_cast<size_t>(tensor.tensor->request().root_rank())];
    // On one node a rank's result offset is where its rows start among the
    // root's.
    for (size_t r = 0; r < tensor.members.size(); ++r) {
      const exec::ops::RankResult rows = exec::ops::ScatterOp().ResultOf(*tensor.tensor, r);
      blocks.push_back({&root, &tensor.members[r], root.input + rows.offset,
                        tensor.members[r].output, rows.bytes});
    }
  }
  return MoveBlocks(issue, blocks);
}

absl::Status IssueMessages(DeviceIssue& issue, std::span<const DeviceTensor> tensors) {
  std::vector<Block> blocks;
  for (const DeviceTensor& tensor : tensors) {
    const DeviceMember& send = tensor.members[0];
    const DeviceMember& receive = tensor.members[1];
    blocks.push_back({&send, &receive, send.input, receive.output, Length(tensor)});
  }
  return MoveBlocks(issue, blocks);
}

}  // namespace collective::daemon::gpu
