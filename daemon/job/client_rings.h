// The two rings of a client's segment as the daemon uses them: completion
// records out, submissions in. Interfaces, so that what completes requests
// and what reads submissions (engine/completion.h, engine/intake.h) can be
// tested with fakes, without segments or threads. Engine thread only.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "shm/client_segment.h"
#include "shm/segment_layout.h"

namespace collective::daemon::job {

class CompletionSink {
 public:
  virtual ~CompletionSink() = default;
  // Makes `record` (and its `text`) visible to the client and wakes it.
  virtual void Publish(shm::CompletionRecord record, absl::string_view text = {}) = 0;
};

class SubmissionSource {
 public:
  virtual ~SubmissionSource() = default;
  // The next message's payload: true if there was one, false if none is
  // waiting, an error if the client published something impossible (the
  // source must not be read again).
  virtual absl::StatusOr<bool> Next(std::string* payload) = 0;
};

// The rings of a segment the daemon created.
std::unique_ptr<CompletionSink> SegmentCompletions(const shm::ClientSegment& segment);
std::unique_ptr<SubmissionSource> SegmentSubmissions(const shm::ClientSegment& segment);

}  // namespace collective::daemon::job
