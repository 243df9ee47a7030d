#include "daemon/job/client_rings.h"

#include "shm/completion_ring.h"
#include "shm/submission_ring.h"

namespace collective::daemon::job {
namespace {

class SegmentCompletionSink final : public CompletionSink {
 public:
  explicit SegmentCompletionSink(const shm::ClientSegment& segment) : ring_(segment) {}
  void Publish(shm::CompletionRecord record, absl::string_view text) override {
    ring_.Publish(record, text);
  }

 private:
  shm::RingPublisher ring_;
};

class SegmentSubmissionSource final : public SubmissionSource {
 public:
  explicit SegmentSubmissionSource(const shm::ClientSegment& segment)
      : reader_(segment.header(), segment.submit_ring(), segment.submit_bytes()) {}
  absl::StatusOr<bool> Next(std::string* payload) override { return reader_.Next(payload); }

 private:
  shm::SubmissionReader reader_;
};

}  // namespace

std::unique_ptr<CompletionSink> SegmentCompletions(const shm::ClientSegment& segment) {
  return std::make_unique<SegmentCompletionSink>(segment);
}

std::unique_ptr<SubmissionSource> SegmentSubmissions(const shm::ClientSegment& segment) {
  return std::make_unique<SegmentSubmissionSource>(segment);
}

}  // namespace collective::daemon::job
