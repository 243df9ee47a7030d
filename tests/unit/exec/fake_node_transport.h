// The transport among the daemons of a job, in process, for unit tests of
// what runs across nodes (exec/node_transport.h) without MPI: nodes are
// objects of one test, as Gloo's tests run ranks as threads. The n-th call
// a node makes on a group pairs with the n-th call of every other node of
// that group, as MPI's collectives on a communicator do; the transfer
// happens when the last of them starts, and each node's Test() sees it from
// then on. Calls that do not pair up (another kind, another size) fail on
// every node. Point-to-point messages pair piece by piece instead, by the
// two places and the tag. Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "daemon/exec/node_transport.h"

namespace collective::daemon::exec {

class FakeFabric {
 public:
  FakeFabric() = default;
  FakeFabric(const FakeFabric&) = delete;
  FakeFabric& operator=(const FakeFabric&) = delete;

  // A group of `size` nodes (a set's nodes; every node's SetSpan of the set
  // holds the same one).
  std::shared_ptr<const job::NodeGroup> NewGroup(int32_t size);
  // The transport of `node`, for every group it belongs to.
  std::unique_ptr<NodeTransport> TransportOf(int32_t node);

  // The next transfer to happen fails on every node with `status`.
  void FailNext(absl::Status status);
  // Transfers a node let go of before they happened.
  int abandoned() const;
  // Transfers that happened.
  int completed() const;
  // The kinds of the collective transfers that happened since the last
  // call ("allreduce", "reduce", "allgather", "gather", ...), in order.
  std::vector<std::string> TakeKinds();

  // One node's side of a call (the Start* arguments).
  struct Call;
  struct Meeting;

  // Records `call` (of node at `place` of `group`); the meeting it joins.
  std::shared_ptr<Meeting> Join(const job::SetSpan& span, int32_t node, Call call);
  absl::StatusOr<bool> Done(const Meeting& meeting) const;
  void Abandon();
  // A message's pieces (`send` or receive, at `place` of `group`, with the
  // node at place `peer`): the n-th piece sent pairs with the n-th received
  // between the same places with the same tag, and happens when both came.
  std::vector<std::shared_ptr<Meeting>> Post(const job::SetSpan& span, int peer, bool send,
                                             void* data, uint64_t bytes, int tag,
                                             uint64_t chunk_bytes);
  // Pieces of messages sent so far.
  int pieces_sent() const;

 private:
  void Happen(Meeting& meeting);

  mutable std::mutex mutex_;
  int32_t next_group_ = 0;
  // By (group, node): calls made so far.
  std::map<std::pair<int32_t, int32_t>, uint64_t> calls_;
  // By (group, sequence number).
  std::map<std::pair<int32_t, uint64_t>, std::shared_ptr<Meeting>> meetings_;
  // By (group, sending place, receiving place, tag): pieces posted by one
  // side that wait for the other's.
  std::map<std::tuple<int32_t, int, int, int>, std::deque<std::shared_ptr<Meeting>>> posts_;
  int pieces_sent_ = 0;
  std::vector<std::string> kinds_;
  absl::Status fail_next_;
  int abandoned_ = 0;
  int completed_ = 0;
};

}  // namespace collective::daemon::exec
