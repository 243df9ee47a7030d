// Fakes of a client's two rings (job/client_rings.h) and of the clients of a
// job, for the tests of what completes requests and what reads submissions:
// no segments, no threads.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/job/client_record.h"
#include "daemon/job/client_rings.h"
#include "shm/segment_layout.h"

namespace collective::daemon::engine {

struct PublishedRecord {
  shm::CompletionRecord record;
  std::string text;
};

class FakeCompletions final : public job::CompletionSink {
 public:
  explicit FakeCompletions(std::vector<PublishedRecord>& out) : out_(out) {}
  void Publish(shm::CompletionRecord record, absl::string_view text) override {
    out_.push_back({record, std::string(text)});
  }

 private:
  std::vector<PublishedRecord>& out_;
};

class FakeSubmissions final : public job::SubmissionSource {
 public:
  explicit FakeSubmissions(std::deque<absl::StatusOr<std::string>>& in) : in_(in) {}
  absl::StatusOr<bool> Next(std::string* payload) override {
    if (in_.empty()) return false;
    absl::StatusOr<std::string> next = std::move(in_.front());
    in_.pop_front();
    if (!next.ok()) return next.status();
    *payload = std::move(*next);
    return true;
  }

 private:
  std::deque<absl::StatusOr<std::string>>& in_;
};

// A client as the daemon sees it, with fake rings: what it was sent, and
// what it will submit.
struct FakeClient {
  explicit FakeClient(uint64_t id, int32_t local_rank = 0) {
    record = std::make_unique<job::ClientRecord>();
    record->id = id;
    record->local_rank = local_rank;
    record->peer = {.pid = 1000 + static_cast<pid_t>(id), .uid = 1000, .gid = 1000};
    record->arena_bytes = 1 << 20;
    record->ring = std::make_unique<FakeCompletions>(published);
    record->submissions = std::make_unique<FakeSubmissions>(submitted);
  }
  // The fakes point at the members above.
  FakeClient(const FakeClient&) = delete;
  FakeClient& operator=(const FakeClient&) = delete;
  std::vector<PublishedRecord> published;
  std::deque<absl::StatusOr<std::string>> submitted;
  std::unique_ptr<job::ClientRecord> record;
};

}  // namespace collective::daemon::engine
