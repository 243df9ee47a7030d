#include "daemon/world/control_channel.h"

#include <cstring>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace collective::daemon::world {
namespace {

// The envelope: the generation, little-endian as every node of a job runs
// the same build on the same architecture.
constexpr size_t kEnvelopeBytes = sizeof(uint64_t);
// Collect tells the channel's messages from the world's by tag.
static_assert(negotiation::kControlTagEnd <= World::kStopNoticeTag);

}  // namespace

ControlChannel::ControlChannel(const World& world, uint64_t generation)
    : world_(world),
      generation_(generation),
      last_heard_(static_cast<size_t>(world.size()), Clock::now()) {}

ControlChannel::~ControlChannel() {
  for (InFlight& send : sends_) {
    if (send.request != MPI_REQUEST_NULL) MPI_Request_free(&send.request);
    (void)send.bytes.release();  // MPI may still read it: leak rather than corrupt
  }
}

absl::Status ControlChannel::Send(int to, negotiation::ControlTag tag,
                                  const google::protobuf::Message& message) {
  InFlight send;
  send.bytes = std::make_unique<std::string>(kEnvelopeBytes, '\0');
  std::memcpy(send.bytes->data(), &generation_, kEnvelopeBytes);
  if (!message.AppendToString(send.bytes.get())) {
    return absl::InternalError(absl::StrCat("cannot serialise a ", message.GetTypeName()));
  }
  if (absl::Status sent =
          MpiStatus(MPI_Isend(send.bytes->data(), static_cast<int>(send.bytes->size()), MPI_BYTE,
                              to, static_cast<int>(tag), world_.control(), &send.request),
                    absl::StrCat("MPI_Isend to node ", to));
      !sent.ok()) {
    return sent;
  }
  sends_.push_back(std::move(send));
  return absl::OkStatus();
}

absl::Status ControlChannel::Progress() {
  while (!sends_.empty()) {
    int done = 0;
    if (absl::Status tested = MpiStatus(MPI_Test(&sends_.front().request, &done, MPI_STATUS_IGNORE),
                                        "MPI_Test of a control message");
        !tested.ok()) {
      return tested;
    }
    if (!done) break;
    sends_.pop_front();
  }
  return absl::OkStatus();
}

absl::Status ControlChannel::Receive(negotiation::ControlTag tag, std::vector<Received>& out) {
  const auto index = static_cast<size_t>(tag);
  if (!collected_[index]) {
    ASSIGN_OR_RETURN(const bool collected, Collect());
    if (!collected) RETURN_IF_ERROR(ProbeTag(static_cast<int>(tag), inboxes_[index]));
  }
  Inbox& inbox = inboxes_[index];
  out.insert(out.end(), std::make_move_iterator(inbox.begin()),
             std::make_move_iterator(inbox.end()));
  inbox.clear();
  collected_[index] = false;
  return absl::OkStatus();
}

absl::StatusOr<bool> ControlChannel::Collect() {
  while (true) {
    int arrived = 0;
    MPI_Status status;
    RETURN_IF_ERROR(
        MpiStatus(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, world_.control(), &arrived, &status),
                  "MPI_Iprobe"));
    if (!arrived) break;
    if (status.MPI_TAG < 1 || status.MPI_TAG >= negotiation::kControlTagEnd) return false;
    RETURN_IF_ERROR(Take(status, inboxes_[static_cast<size_t>(status.MPI_TAG)]));
  }
  collected_.fill(true);
  return true;
}

absl::Status ControlChannel::ProbeTag(int tag, Inbox& inbox) {
  while (true) {
    int arrived = 0;
    MPI_Status status;
    RETURN_IF_ERROR(MpiStatus(MPI_Iprobe(MPI_ANY_SOURCE, tag, world_.control(), &arrived, &status),
                              "MPI_Iprobe"));
    if (!arrived) return absl::OkStatus();
    RETURN_IF_ERROR(Take(status, inbox));
  }
}

absl::Status ControlChannel::Take(const MPI_Status& probed, Inbox& inbox) {
  int bytes = 0;
  MPI_Get_count(&probed, MPI_BYTE, &bytes);
  std::string buffer(static_cast<size_t>(bytes), '\0');
  RETURN_IF_ERROR(MpiStatus(MPI_Recv(buffer.data(), bytes, MPI_BYTE, probed.MPI_SOURCE,
                                     probed.MPI_TAG, world_.control(), MPI_STATUS_IGNORE),
                            absl::StrCat("MPI_Recv from node ", probed.MPI_SOURCE)));
  uint64_t generation = 0;
  if (buffer.size() >= kEnvelopeBytes) std::memcpy(&generation, buffer.data(), kEnvelopeBytes);
  if (buffer.size() < kEnvelopeBytes || generation != generation_) {
    log::Mpi().debug("dropped a message from node {} of job generation {} (this is {})",
                     probed.MPI_SOURCE, generation, generation_);
    return absl::OkStatus();
  }
  last_heard_[static_cast<size_t>(probed.MPI_SOURCE)] = Clock::now();
  inbox.push_back({probed.MPI_SOURCE, buffer.substr(kEnvelopeBytes)});
  return absl::OkStatus();
}

}  // namespace collective::daemon::world
