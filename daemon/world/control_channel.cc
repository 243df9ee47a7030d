#include "daemon/world/control_channel.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace collective::daemon::world {
namespace {

// The envelope: the generation, little-endian as every node of a job runs
// the same build on the same architecture.
constexpr size_t kEnvelopeBytes = sizeof(uint64_t);

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
  while (true) {
    int arrived = 0;
    MPI_Status status;
    if (absl::Status probed = MpiStatus(
            MPI_Iprobe(MPI_ANY_SOURCE, static_cast<int>(tag), world_.control(), &arrived, &status),
            "MPI_Iprobe");
        !probed.ok()) {
      return probed;
    }
    if (!arrived) return absl::OkStatus();
    int bytes = 0;
    MPI_Get_count(&status, MPI_BYTE, &bytes);
    std::string buffer(static_cast<size_t>(bytes), '\0');
    if (absl::Status received =
            MpiStatus(MPI_Recv(buffer.data(), bytes, MPI_BYTE, status.MPI_SOURCE,
                               static_cast<int>(tag), world_.control(), MPI_STATUS_IGNORE),
                      absl::StrCat("MPI_Recv from node ", status.MPI_SOURCE));
        !received.ok()) {
      return received;
    }
    uint64_t generation = 0;
    if (buffer.size() >= kEnvelopeBytes) std::memcpy(&generation, buffer.data(), kEnvelopeBytes);
    if (buffer.size() < kEnvelopeBytes || generation != generation_) {
      log::Mpi().debug("dropped a message from node {} of job generation {} (this is {})",
                       status.MPI_SOURCE, generation, generation_);
      continue;
    }
    last_heard_[status.MPI_SOURCE] = Clock::now();
    out.push_back({status.MPI_SOURCE, buffer.substr(kEnvelopeBytes)});
  }
}

}  // namespace collective::daemon::world
