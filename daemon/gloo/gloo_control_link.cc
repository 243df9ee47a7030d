#include "daemon/gloo/gloo_control_link.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <exception>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace collective::daemon::gloo {
namespace {

// The frame's header: what the receiver needs to take the rest. Native
// byte order: every node of a job runs the same build on the same
// architecture.
struct Header {
  uint32_t magic = 0;
  uint32_t tag = 0;
  uint64_t length = 0;  // of the message, without the header
};
constexpr uint32_t kMagic = 0x4c4f4347;  // "GCOL"
constexpr size_t kHeaderBytes = sizeof(Header);
static_assert(kHeaderBytes == 16);

// The first transfer of a frame: header and up to this many bytes in all,
// so that most control messages take one transfer. The receiver posts a
// buffer of this size per peer.
constexpr size_t kFirstBytes = 16 * 1024;
// The slots of the control context (which carries nothing else): first
// transfers, and the rests of longer messages.
constexpr uint64_t kFirstSlot = 1;
constexpr uint64_t kRestSlot = 2;
// Where a receiving thread's buffers each have a receive posted that never
// completes, for the pair's failure to reach them (see the header).
constexpr uint64_t kWatchSlot = 3;

// Gloo fails a wait that times out by closing every pair of the context;
// the link's threads wait until they are aborted instead. A year, which
// steady_clock's nanoseconds hold.
constexpr std::chrono::milliseconds kForever = std::chrono::hours(24 * 365);

absl::Status GoneStatus(const std::string& name, absl::string_view why) {
  return absl::UnavailableError(absl::StrCat(name, " is gone from the job's control link: ", why));
}

}  // namespace

GlooControlLink::GlooControlLink(std::shared_ptr<::gloo::Context> control,
                                 std::vector<std::string> names)
    : control_(std::move(control)),
      names_(std::move(names)),
      node_(control_->rank),
      nodes_(control_->size),
      waiting_(static_cast<size_t>(nodes_) + 1),
      last_heard_(static_cast<size_t>(nodes_), Clock::now()),
      gone_(static_cast<size_t>(nodes_)) {
  threads_.emplace_back([this] { CompleteLoop(); });
  for (int peer = 0; peer < nodes_; ++peer) {
    if (peer != node_) threads_.emplace_back([this, peer] { ReceiveLoop(peer); });
  }
}

GlooControlLink::GlooControlLink(JobWorld& world)
    : GlooControlLink(world.TakeControl(), [&world] {
        std::vector<std::string> names;
        for (int node = 0; node < world.nodes(); ++node) names.push_back(world.NodeName(node));
        return names;
      }()) {}

GlooControlLink::~GlooControlLink() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    for (const Waiting& waiting : waiting_) Abort(waiting);
  }
  posted_.notify_all();
  for (std::thread& thread : threads_) thread.join();
  // Now that no thread posts or waits, the buffers go (their transfers
  // with them), then the connections: destroying the context closes them
  // after what was written, and the peers see this node leave. Should
  // anyone else hold the context, its connections are reset instead.
  in_flight_.clear();
  if (control_.use_count() == 1) {
    control_.reset();
    return;
  }
  try {
    control_->closeConnections();
  } catch (const std::exception& error) {
    log::Coord().warn("closing the control link of {}: {}", names_[static_cast<size_t>(node_)],
                      error.what());
  }
}

absl::Status GlooControlLink::Flush(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  const bool drained =
      drained_.wait_until(lock, deadline, [&] { return unfinished_ == 0 || !first_failure_.ok(); });
  if (!first_failure_.ok()) return first_failure_;
  if (!drained) {
    return absl::DeadlineExceededError(absl::StrCat(unfinished_, " control messages of ",
                                                    names_[static_cast<size_t>(node_)],
                                                    " had not left by the deadline"));
  }
  return absl::OkStatus();
}

absl::Status GlooControlLink::Send(int to, negotiation::ControlTag tag,
                                   const google::protobuf::Message& message) {
  if (to < 0 || to >= nodes_) {
    return absl::InvalidArgumentError(
        absl::StrCat("a control message to node ", to, " of ", nodes_));
  }
  if (static_cast<int>(tag) < 1 || static_cast<int>(tag) >= negotiation::kControlTagEnd) {
    return absl::InvalidArgumentError(absl::StrCat("no control tag ", static_cast<int>(tag)));
  }
  const size_t length = message.ByteSizeLong();
  if (length > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat("a ", message.GetTypeName(), " of ", length,
                                                   " bytes is too long for a control message"));
  }
  if (to == node_) {
    std::string bytes;
    if (!message.SerializeToString(&bytes)) {
      return absl::InternalError(absl::StrCat("cannot serialise a ", message.GetTypeName()));
    }
    Deliver(node_, static_cast<int>(tag), std::move(bytes));
    return absl::OkStatus();
  }
  InFlight posted{to, std::vector<char>(kHeaderBytes + length), nullptr, nullptr};
  const Header header{kMagic, static_cast<uint32_t>(tag), length};
  std::memcpy(posted.frame.data(), &header, kHeaderBytes);
  if (!message.SerializeToArray(posted.frame.data() + kHeaderBytes, static_cast<int>(length))) {
    return absl::InternalError(absl::StrCat("cannot serialise a ", message.GetTypeName()));
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!gone_[static_cast<size_t>(to)].ok()) return gone_[static_cast<size_t>(to)];
  }
  std::vector<char>& frame = posted.frame;
  const size_t first_bytes = std::min(frame.size(), kFirstBytes);
  try {
    posted.first = control_->createUnboundBuffer(frame.data(), first_bytes);
    posted.first->send(to, kFirstSlot, 0, first_bytes);
    if (frame.size() > first_bytes) {
      posted.rest =
          control_->createUnboundBuffer(frame.data() + first_bytes, frame.size() - first_bytes);
      posted.rest->send(to, kRestSlot, 0, frame.size() - first_bytes);
    }
  } catch (const std::exception& error) {
    // A part posted before the failure is abandoned with its buffer.
    absl::Status gone = GoneStatus(names_[static_cast<size_t>(to)], error.what());
    Fail(to, gone);
    std::lock_guard<std::mutex> lock(mutex_);
    return gone_[static_cast<size_t>(to)].ok() ? gone : gone_[static_cast<size_t>(to)];
  }
  std::lock_guard<std::mutex> lock(mutex_);
  in_flight_.push_back(std::move(posted));
  ++unfinished_;
  posted_.notify_one();
  return absl::OkStatus();
}

absl::Status GlooControlLink::Receive(negotiation::ControlTag tag, std::vector<Received>& out) {
  const int index = static_cast<int>(tag);
  if (index < 1 || index >= negotiation::kControlTagEnd) {
    return absl::InvalidArgumentError(absl::StrCat("no control tag ", index));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Received>& inbox = inboxes_[static_cast<size_t>(index)];
  out.insert(out.end(), std::make_move_iterator(inbox.begin()),
             std::make_move_iterator(inbox.end()));
  inbox.clear();
  return first_failure_;
}

absl::Status GlooControlLink::Progress() {
  std::lock_guard<std::mutex> lock(mutex_);
  return first_failure_;
}

int GlooControlLink::first_gone() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return first_gone_;
}

Clock::time_point GlooControlLink::last_heard(int node) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_heard_[static_cast<size_t>(node)];
}

void GlooControlLink::Deliver(int from, int tag, std::string bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  last_heard_[static_cast<size_t>(from)] = Clock::now();
  inboxes_[static_cast<size_t>(tag)].push_back({from, std::move(bytes)});
}

void GlooControlLink::Fail(int peer, absl::Status why) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ || !gone_[static_cast<size_t>(peer)].ok()) return;
    gone_[static_cast<size_t>(peer)] = why;
    if (first_failure_.ok()) {
      first_failure_ = why;
      first_gone_ = peer;
    }
    drained_.notify_all();
    // Gloo may never fail a wait on a transfer under way to or from it.
    for (const Waiting& waiting : waiting_) {
      if (waiting.peer == peer) Abort(waiting);
    }
  }
  // A warning: the engine decides what the loss means for the job (at the
  // end of a job, the nodes' links go away one after another).
  log::Coord().warn("{}", why.message());
}

void GlooControlLink::Abort(const Waiting& waiting) {
  if (waiting.buffer == nullptr) return;
  if (waiting.send) {
    waiting.buffer->abortWaitSend();
  } else {
    waiting.buffer->abortWaitRecv();
  }
}

std::unique_ptr<::gloo::transport::UnboundBuffer> GlooControlLink::Watched(
    std::vector<char>& memory, int peer) {
  auto buffer = control_->createUnboundBuffer(memory.data(), memory.size());
  buffer->recv(peer, kWatchSlot, 0, 0);
  return buffer;
}

bool GlooControlLink::Wait(size_t slot, ::gloo::transport::UnboundBuffer& buffer, int peer,
                           bool send) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ || !gone_[static_cast<size_t>(peer)].ok()) return false;
    waiting_[slot] = {&buffer, peer, send};
  }
  bool done = false;
  try {
    done = send ? buffer.waitSend(nullptr, kForever) : buffer.waitRecv(nullptr, kForever);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    waiting_[slot] = {};
    throw;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  waiting_[slot] = {};
  return done && !stopping_ && gone_[static_cast<size_t>(peer)].ok();
}

void GlooControlLink::ReceiveLoop(int peer) {
  const std::string& name = names_[static_cast<size_t>(peer)];
  const auto slot = static_cast<size_t>(peer);
  // The memory outlives the buffers over it: destroying a buffer waits
  // until Gloo's loop no longer writes into it.
  std::vector<char> first(kFirstBytes);
  std::vector<char> rest;
  std::unique_ptr<::gloo::transport::UnboundBuffer> first_buffer;
  std::unique_ptr<::gloo::transport::UnboundBuffer> rest_buffer;
  try {
    first_buffer = Watched(first, peer);
    while (true) {
      first_buffer->recv(peer, kFirstSlot, 0, kFirstBytes);
      if (!Wait(slot, *first_buffer, peer, /*send=*/false)) return;
      Header header;
      std::memcpy(&header, first.data(), kHeaderBytes);
      if (header.magic != kMagic || header.tag < 1 ||
          header.tag >= static_cast<uint32_t>(negotiation::kControlTagEnd) ||
          header.length > static_cast<uint64_t>(INT_MAX)) {
        Fail(peer, absl::DataLossError(absl::StrCat(
                       name, " sent an unreadable control message (tag ", header.tag, ", ",
                       header.length, " bytes): is it running another build of collectived?")));
        return;
      }
      const auto length = static_cast<size_t>(header.length);
      const size_t inlined = std::min(length, kFirstBytes - kHeaderBytes);
      std::string bytes(length, '\0');
      std::memcpy(bytes.data(), first.data() + kHeaderBytes, inlined);
      if (const size_t remaining = length - inlined; remaining > 0) {
        if (rest.size() < remaining) {
          // Grown rarely (doubling), as each buffer leaves its watching
          // receive queued for good.
          rest_buffer.reset();
          rest.resize(std::max(remaining, 2 * rest.size()));
          rest_buffer = Watched(rest, peer);
        }
        rest_buffer->recv(peer, kRestSlot, 0, remaining);
        if (!Wait(slot, *rest_buffer, peer, /*send=*/false)) return;
        std::memcpy(bytes.data() + inlined, rest.data(), remaining);
      }
      Deliver(peer, static_cast<int>(header.tag), std::move(bytes));
    }
  } catch (const std::exception& error) {
    Fail(peer, GoneStatus(name, error.what()));
  }
}

void GlooControlLink::CompleteLoop() {
  const auto slot = static_cast<size_t>(nodes_);
  while (true) {
    InFlight oldest;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      posted_.wait(lock, [&] { return stopping_ || !in_flight_.empty(); });
      if (stopping_) return;
      oldest = std::move(in_flight_.front());  // the buffers keep their memory
      in_flight_.pop_front();
    }
    // A send to a peer that is gone is abandoned (its receiving thread
    // records why); one that stops the link too.
    try {
      if (Wait(slot, *oldest.first, oldest.to, /*send=*/true) && oldest.rest != nullptr) {
        (void)Wait(slot, *oldest.rest, oldest.to, /*send=*/true);
      }
    } catch (const std::exception& error) {
      Fail(oldest.to, GoneStatus(names_[static_cast<size_t>(oldest.to)], error.what()));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    --unfinished_;
    drained_.notify_all();
  }
}

}  // namespace collective::daemon::gloo
