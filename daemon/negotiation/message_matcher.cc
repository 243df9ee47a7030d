#include "daemon/negotiation/message_matcher.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace collective::daemon::negotiation {

std::string MessageName(int32_t process_set_id, int32_t source, int32_t destination, int32_t tag) {
  return absl::StrCat(
      "message from rank ", source, " to rank ", destination, " with tag ", tag,
      process_set_id == 0 ? "" : absl::StrCat(" (process set ", process_set_id, ")"));
}

void MessageMatcher::Add(Submission submission, const job::ProcessSet& set) {
  const v1::TensorRequest& request = submission.request;
  const bool send = request.collective() == v1::COLLECTIVE_SEND;
  const int32_t source = send ? submission.set_rank : request.peer_rank();
  const int32_t destination = send ? request.peer_rank() : submission.set_rank;
  const Key key{request.process_set_id(), source, destination, request.tag()};
  const int32_t peer = set.ranks[request.peer_rank()];
  Queues& queues = queues_[key];
  std::deque<Half>& others = send ? queues.receives : queues.sends;
  if (others.empty()) {
    (send ? queues.sends : queues.receives).push_back({std::move(submission), peer});
    return;
  }
  Submission other = std::move(others.front().submission);
  others.pop_front();
  ReadyTensor ready{
      .name = MessageName(request.process_set_id(), source, destination, request.tag()),
      .process_set_id = request.process_set_id(),
      .set_size = set.size(),
      .completed_by = submission.set_rank,
      .first_at = other.at,
      .ready_at = Clock::now()};
  // The send first: ReadyTensor::request() is the send's, as fusion and the
  // op expect.
  if (send) {
    ready.submissions.push_back(std::move(submission));
    ready.submissions.push_back(std::move(other));
  } else {
    ready.submissions.push_back(std::move(other));
    ready.submissions.push_back(std::move(submission));
  }
  matched_.push_back(std::move(ready));
  if (queues.sends.empty() && queues.receives.empty()) queues_.erase(key);
}

std::vector<ReadyTensor> MessageMatcher::TakeMatched() { return std::exchange(matched_, {}); }

std::vector<Submission> MessageMatcher::TakeAll() {
  std::vector<Submission> taken;
  for (auto& [key, queues] : queues_) {
    for (Half& half : queues.sends) taken.push_back(std::move(half.submission));
    for (Half& half : queues.receives) taken.push_back(std::move(half.submission));
  }
  queues_.clear();
  for (ReadyTensor& ready : matched_) {
    for (Submission& submission : ready.submissions) taken.push_back(std::move(submission));
  }
  matched_.clear();
  return taken;
}

std::vector<Submission> MessageMatcher::TakeSet(int32_t process_set_id) {
  std::vector<Submission> taken;
  for (auto it = queues_.begin(); it != queues_.end();) {
    if (std::get<0>(it->first) != process_set_id) {
      ++it;
      continue;
    }
    for (Half& half : it->second.sends) taken.push_back(std::move(half.submission));
    for (Half& half : it->second.receives) taken.push_back(std::move(half.submission));
    queues_.erase(it++);
  }
  return taken;
}

WaitingMessage WaitingOf(const Submission& submission, int32_t peer) {
  const v1::TensorRequest& request = submission.request;
  return {.process_set_id = request.process_set_id(),
          .collective = request.collective(),
          .rank = submission.rank,
          .peer = peer,
          .tag = request.tag(),
          .dtype = request.dtype(),
          .bytes = request.length(),
          .since = submission.at};
}

std::vector<WaitingMessage> MessageMatcher::Waiting() const {
  std::vector<WaitingMessage> waiting;
  for (const auto& [key, queues] : queues_) {
    for (const std::deque<Half>* halves : {&queues.sends, &queues.receives}) {
      for (const Half& half : *halves) waiting.push_back(WaitingOf(half.submission, half.peer));
    }
  }
  std::sort(waiting.begin(), waiting.end(),
            [](const WaitingMessage& a, const WaitingMessage& b) { return a.since < b.since; });
  return waiting;
}

}  // namespace collective::daemon::negotiation
