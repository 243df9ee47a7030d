#include "daemon/negotiator.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace collective::daemon {
namespace {

constexpr int kReadyTag = 1;
constexpr int kDecisionTag = 2;

// A ReadyTensor of every rank's request, for the checks of node 0.
ReadyTensor Everyone(const v1::Decision& decision, int32_t set_size) {
  ReadyTensor tensor;
  tensor.name = decision.name();
  tensor.process_set_id = decision.process_set_id();
  tensor.set_size = set_size;
  for (const v1::RankRequest& rank : decision.ranks()) {
    tensor.submissions.push_back(Submission{.client = nullptr,
                                            .set_rank = rank.set_rank(),
                                            .rank = rank.rank(),
                                            .request = rank.request(),
                                            .at = {}});
  }
  return tensor;
}

}  // namespace

Negotiator::Negotiator(const World& world, NodeLayout layout, GlobalCheck check)
    : world_(world), layout_(std::move(layout)), check_(check) {}

Negotiator::~Negotiator() {
  // Sends still in flight would write into freed buffers' peers only on the
  // receiving side; ours must stay until MPI is done with them, and a job
  // that ends normally has none (every decision was received).
  for (InFlight& send : sends_) {
    if (send.request != MPI_REQUEST_NULL) MPI_Request_free(&send.request);
    (void)send.bytes.release();  // MPI may still read it: leak rather than corrupt
  }
}

void Negotiator::Announce(const ReadyTensor& tensor, const ProcessSet& set) {
  v1::NodeTensor* announced = outgoing_.add_tensors();
  announced->set_process_set_id(tensor.process_set_id);
  announced->set_name(tensor.name);
  for (const Submission& submission : tensor.submissions) {
    v1::RankRequest* rank = announced->add_ranks();
    rank->set_set_rank(submission.set_rank);
    rank->set_rank(set.ranks[submission.set_rank]);
    *rank->mutable_request() = submission.request;
  }
  ++undecided_;
}

int32_t Negotiator::NodesOf(const ProcessSet& set) const {
  std::set<int32_t> nodes;
  for (int32_t rank : set.ranks) nodes.insert(layout_.NodeOf(rank));
  return static_cast<int32_t>(nodes.size());
}

void Negotiator::Collect(const v1::NodeTensor& tensor, const ProcessSetTable& sets) {
  const ProcessSet* set = sets.Find(tensor.process_set_id());
  Pending& pending = table_[{tensor.process_set_id(), tensor.name()}];
  for (const v1::RankRequest& rank : tensor.ranks()) pending.ranks.push_back(rank);
  ++pending.nodes_announced;
  if (set != nullptr && pending.nodes_announced < NodesOf(*set)) return;

  v1::Decision* decision = decided_.add_decisions();
  decision->set_process_set_id(tensor.process_set_id());
  decision->set_name(tensor.name());
  std::vector<v1::RankRequest> ranks = std::move(pending.ranks);
  table_.erase({tensor.process_set_id(), tensor.name()});
  std::sort(ranks.begin(), ranks.end(),
            [](const auto& a, const auto& b) { return a.set_rank() < b.set_rank(); });
  for (v1::RankRequest& rank : ranks) *decision->add_ranks() = std::move(rank);
  absl::Status status =
      set == nullptr ? absl::NotFoundError(absl::StrCat("process set ", tensor.process_set_id(),
                                                        " was removed while '", tensor.name(),
                                                        "' was pending"))
                     : check_(Everyone(*decision, set->size()));
  decision->set_code(static_cast<int32_t>(status.code()));
  decision->set_message(std::string(status.message()));
}

absl::Status Negotiator::Send(int to, int tag, const google::protobuf::Message& message) {
  InFlight send;
  send.bytes = std::make_unique<std::string>(message.SerializeAsString());
  if (absl::Status sent =
          MpiStatus(MPI_Isend(send.bytes->data(), static_cast<int>(send.bytes->size()), MPI_BYTE,
                              to, tag, world_.control(), &send.request),
                    absl::StrCat("MPI_Isend to node ", to));
      !sent.ok()) {
    return sent;
  }
  sends_.push_back(std::move(send));
  return absl::OkStatus();
}

absl::Status Negotiator::FinishSends() {
  while (!sends_.empty()) {
    int done = 0;
    if (absl::Status tested = MpiStatus(MPI_Test(&sends_.front().request, &done, MPI_STATUS_IGNORE),
                                        "MPI_Test of a negotiation message");
        !tested.ok()) {
      return tested;
    }
    if (!done) break;
    sends_.pop_front();
  }
  return absl::OkStatus();
}

absl::Status Negotiator::Receive(int tag, std::vector<std::pair<int, std::string>>& out) {
  while (true) {
    int arrived = 0;
    MPI_Status status;
    if (absl::Status probed = MpiStatus(
            MPI_Iprobe(MPI_ANY_SOURCE, tag, world_.control(), &arrived, &status), "MPI_Iprobe");
        !probed.ok()) {
      return probed;
    }
    if (!arrived) return absl::OkStatus();
    int bytes = 0;
    MPI_Get_count(&status, MPI_BYTE, &bytes);
    std::string buffer(static_cast<size_t>(bytes), '\0');
    if (absl::Status received =
            MpiStatus(MPI_Recv(buffer.data(), bytes, MPI_BYTE, status.MPI_SOURCE, tag,
                               world_.control(), MPI_STATUS_IGNORE),
                      absl::StrCat("MPI_Recv from node ", status.MPI_SOURCE));
        !received.ok()) {
      return received;
    }
    out.emplace_back(status.MPI_SOURCE, std::move(buffer));
  }
}

absl::StatusOr<std::vector<v1::Decisions>> Negotiator::Exchange(const ProcessSetTable& sets) {
  std::vector<v1::Decisions> decisions;
  std::vector<std::pair<int, std::string>> messages;
  if (world_.rank() == 0) {
    for (const v1::NodeTensor& tensor : outgoing_.tensors()) Collect(tensor, sets);
    outgoing_.Clear();
    if (absl::Status received = Receive(kReadyTag, messages); !received.ok()) return received;
    for (const auto& [from, bytes] : messages) {
      v1::NodeReady ready;
      if (!ready.ParseFromString(bytes)) {
        return absl::DataLossError(absl::StrCat("node ", from, " sent an unreadable message"));
      }
      for (const v1::NodeTensor& tensor : ready.tensors()) Collect(tensor, sets);
    }
    if (!decided_.decisions().empty()) {
      for (int node = 1; node < world_.size(); ++node) {
        if (absl::Status sent = Send(node, kDecisionTag, decided_); !sent.ok()) return sent;
      }
      decisions.push_back(std::move(decided_));
      decided_.Clear();
    }
  } else {
    if (!outgoing_.tensors().empty()) {
      if (absl::Status sent = Send(0, kReadyTag, outgoing_); !sent.ok()) return sent;
      outgoing_.Clear();
    }
    if (absl::Status received = Receive(kDecisionTag, messages); !received.ok()) return received;
    for (const auto& [from, bytes] : messages) {
      v1::Decisions batch;
      if (!batch.ParseFromString(bytes)) {
        return absl::DataLossError(absl::StrCat("node ", from, " sent unreadable decisions"));
      }
      decisions.push_back(std::move(batch));
    }
  }
  if (absl::Status sent = FinishSends(); !sent.ok()) return sent;
  return decisions;
}

}  // namespace collective::daemon
