#include "daemon/negotiation/remote_messages.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "daemon/negotiation/mismatch.h"

namespace collective::daemon::negotiation {
namespace {

// Data tags start above the small tags any other point-to-point traffic on
// a set's communicator could use, and wrap well below MPI_TAG_UB's
// guaranteed minimum (32767): only receives in flight at once between two
// nodes must differ, and MPI keeps those of one tag in order anyway.
constexpr int kFirstDataTag = 1000;
constexpr uint64_t kDataTags = 30000;

// Takes every control message of `tag` that arrived and hands each, parsed as
// a `Message`, to `on(from, message)`; DATA_LOSS, naming the node, for one
// that does not parse (`what` says what it should have been).
template <typename Message, typename On>
absl::Status ReceiveEach(ControlLink& link, ControlTag tag, absl::string_view what, On on) {
  std::vector<ControlLink::Received> arrived;
  if (absl::Status received = link.Receive(tag, arrived); !received.ok()) return received;
  for (ControlLink::Received& message : arrived) {
    Message parsed;
    if (!parsed.ParseFromString(message.bytes)) {
      return absl::DataLossError(
          absl::StrCat("node ", message.from, " sent a ", what, " that does not parse"));
    }
    on(message.from, std::move(parsed));
  }
  return absl::OkStatus();
}

// The sender's half an answer describes: a submission of another node, so
// without a client.
Submission SenderHalf(v1::MessageReply& reply) {
  Submission send;
  send.client = nullptr;
  send.set_rank = reply.set_rank();
  send.rank = reply.rank();
  send.request = std::move(*reply.mutable_request());
  send.at = Clock::now();
  return send;
}

}  // namespace

RemoteMessages::RemoteMessages(ControlLink& link, job::NodeLayout layout)
    : link_(link), layout_(std::move(layout)) {}

int RemoteMessages::DataTag(uint64_t id) {
  return kFirstDataTag + static_cast<int>(id % kDataTags);
}

absl::Status RemoteMessages::Add(Submission submission, const job::ProcessSet& set) {
  const v1::TensorRequest& request = submission.request;
  const int32_t peer = set.ranks[request.peer_rank()];
  const int node = layout_.NodeOf(peer);
  if (request.collective() == v1::COLLECTIVE_RECV) {
    const uint64_t id = next_id_++;
    v1::MessageNotice notice;
    notice.set_id(id);
    notice.set_set_rank(submission.set_rank);
    notice.set_rank(submission.rank);
    notice.set_sender(peer);
    *notice.mutable_request() = request;
    receives_.emplace(id, Half{std::move(submission), peer});
    return link_.Send(node, ControlTag::kMessageNotice, notice);
  }
  const Key key{request.process_set_id(), submission.set_rank, request.peer_rank(), request.tag()};
  if (auto it = notices_.find(key); it != notices_.end()) {
    Notice notice = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) notices_.erase(it);
    Meet(std::move(submission), std::move(notice));
    return absl::OkStatus();
  }
  sends_[key].push_back({std::move(submission), peer});
  return absl::OkStatus();
}

void RemoteMessages::Meet(Submission send, Notice notice) {
  const v1::TensorRequest& request = send.request;
  Submission receive{.client = nullptr,
                     .set_rank = notice.notice.set_rank(),
                     .rank = notice.notice.rank(),
                     .request = std::move(*notice.notice.mutable_request()),
                     .at = Clock::now()};
  ReadyTensor pair{
      .name = MessageName(request.process_set_id(), send.set_rank, receive.set_rank, request.tag()),
      .process_set_id = request.process_set_id()};
  pair.submissions.push_back(std::move(send));
  pair.submissions.push_back(std::move(receive));
  const absl::Status agreement = CheckAgreement(pair);
  MatchedSend matched{.send = std::move(pair.submissions[0]),
                      .receive = std::move(pair.submissions[1]),
                      .node = notice.node,
                      .id = notice.notice.id()};
  if (agreement.ok()) {
    polled_.sends.push_back(std::move(matched));
    return;
  }
  v1::MessageReply reply;
  reply.set_id(matched.id);
  reply.set_code(static_cast<int32_t>(agreement.code()));
  reply.set_message(std::string(agreement.message()));
  reply.set_set_rank(matched.send.set_rank);
  reply.set_rank(matched.send.rank);
  *reply.mutable_request() = matched.send.request;
  const absl::Status sent = link_.Send(matched.node, ControlTag::kMessageReply, reply);
  // The local send fails with the sentence whether or not the answer went
  // out: a link that failed breaks the world, and the job with it.
  polled_.refused.emplace_back(std::move(matched.send), sent.ok() ? agreement : sent);
}

void RemoteMessages::OnNotice(int from, v1::MessageNotice notice) {
  const v1::TensorRequest& request = notice.request();
  const Key key{request.process_set_id(), request.peer_rank(), notice.set_rank(), request.tag()};
  if (auto it = sends_.find(key); it != sends_.end()) {
    Submission send = std::move(it->second.front().submission);
    it->second.pop_front();
    if (it->second.empty()) sends_.erase(it);
    Meet(std::move(send), Notice{from, std::move(notice), Clock::now()});
    return;
  }
  notices_[key].push_back({from, std::move(notice), Clock::now()});
}

void RemoteMessages::OnReply(int from, v1::MessageReply reply) {
  auto it = receives_.find(reply.id());
  if (it == receives_.end()) {
    // Its set was removed, or the job failed: bytes that follow must still
    // be taken, or the sender's node would wait for that forever.
    if (reply.code() == 0 && reply.data_follows()) {
      AnsweredReceive orphan;
      orphan.send = SenderHalf(reply);
      orphan.node = from;
      orphan.id = reply.id();
      orphan.data_follows = true;
      polled_.orphaned.push_back(std::move(orphan));
    }
    return;
  }
  // Filled field by field: GCC's -O1 (the sanitizer builds) takes the
  // designated initializer's moved protobuf for maybe-uninitialized.
  AnsweredReceive answered;
  answered.receive = std::move(it->second.submission);
  answered.send = SenderHalf(reply);
  answered.node = from;
  answered.id = reply.id();
  answered.data_follows = reply.data_follows();
  answered.data = std::move(*reply.mutable_data());
  receives_.erase(it);
  if (reply.code() != 0) {
    answered.status = absl::Status(static_cast<absl::StatusCode>(reply.code()), reply.message());
  }
  polled_.receives.push_back(std::move(answered));
}

absl::StatusOr<RemoteMessages::Polled> RemoteMessages::Poll() {
  RETURN_IF_ERROR(ReceiveEach<v1::MessageNotice>(
      link_, ControlTag::kMessageNotice, "message notice",
      [this](int from, v1::MessageNotice notice) { OnNotice(from, std::move(notice)); }));
  RETURN_IF_ERROR(ReceiveEach<v1::MessageReply>(
      link_, ControlTag::kMessageReply, "message answer",
      [this](int from, v1::MessageReply reply) { OnReply(from, std::move(reply)); }));
  return std::exchange(polled_, {});
}

absl::Status RemoteMessages::Answer(const MatchedSend& send, absl::string_view data,
                                    bool data_follows) {
  v1::MessageReply reply;
  reply.set_id(send.id);
  reply.set_set_rank(send.send.set_rank);
  reply.set_rank(send.send.rank);
  *reply.mutable_request() = send.send.request;
  reply.set_data_follows(data_follows);
  reply.set_data(std::string(data));
  return link_.Send(send.node, ControlTag::kMessageReply, reply);
}

std::vector<Submission> RemoteMessages::TakeAll() {
  std::vector<Submission> taken;
  for (auto& [key, halves] : sends_) {
    for (Half& half : halves) taken.push_back(std::move(half.submission));
  }
  for (auto& [id, half] : receives_) taken.push_back(std::move(half.submission));
  for (MatchedSend& send : polled_.sends) taken.push_back(std::move(send.send));
  for (AnsweredReceive& receive : polled_.receives) taken.push_back(std::move(receive.receive));
  for (auto& [send, why] : polled_.refused) taken.push_back(std::move(send));
  std::vector<AnsweredReceive> orphaned = std::move(polled_.orphaned);
  sends_.clear();
  notices_.clear();
  receives_.clear();
  polled_ = {};
  polled_.orphaned = std::move(orphaned);
  return taken;
}

std::vector<Submission> RemoteMessages::TakeSet(int32_t process_set_id,
                                                std::vector<uint64_t>* announced) {
  std::vector<Submission> taken;
  for (auto it = sends_.begin(); it != sends_.end();) {
    if (std::get<0>(it->first) != process_set_id) {
      ++it;
      continue;
    }
    for (Half& half : it->second) taken.push_back(std::move(half.submission));
    it = sends_.erase(it);
  }
  for (auto it = notices_.begin(); it != notices_.end();) {
    it = std::get<0>(it->first) == process_set_id ? notices_.erase(it) : std::next(it);
  }
  for (auto it = receives_.begin(); it != receives_.end();) {
    if (it->second.submission.request.process_set_id() != process_set_id) {
      ++it;
      continue;
    }
    if (announced != nullptr) announced->push_back(it->first);
    taken.push_back(std::move(it->second.submission));
    it = receives_.erase(it);
  }
  return taken;
}

std::vector<WaitingMessage> RemoteMessages::Waiting() const {
  std::vector<WaitingMessage> waiting;
  const auto add = [&](const Half& half) {
    waiting.push_back(WaitingOf(half.submission, half.peer));
  };
  for (const auto& [key, halves] : sends_) {
    for (const Half& half : halves) add(half);
  }
  for (const auto& [id, half] : receives_) add(half);
  // Another node's receive that waits for a send from a rank here: this
  // node's status shows who waits for its rank.
  for (const auto& [key, notices] : notices_) {
    for (const Notice& notice : notices) {
      const v1::TensorRequest& request = notice.notice.request();
      waiting.push_back({.process_set_id = request.process_set_id(),
                         .collective = v1::COLLECTIVE_RECV,
                         .rank = notice.notice.rank(),
                         .peer = notice.notice.sender(),
                         .tag = request.tag(),
                         .dtype = request.dtype(),
                         .bytes = request.length(),
                         .since = notice.at});
    }
  }
  std::sort(waiting.begin(), waiting.end(),
            [](const WaitingMessage& a, const WaitingMessage& b) { return a.since < b.since; });
  return waiting;
}

}  // namespace collective::daemon::negotiation
