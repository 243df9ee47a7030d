// A client of collectived without libcollective, for protocol tests: it
// speaks the wire API (proto/collective/v1) directly, maps its segments with
// shm/, and can send anything — including what libcollective never would.
// Every wait takes a deadline; nothing here sleeps to synchronise.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/v1/collective.grpc.pb.h"
#include "shm/client_segment.h"
#include "shm/completion_ring.h"
#include "shm/doorbell_segment.h"
#include "shm/result_segment.h"
#include "shm/submission_ring.h"
#include "tests/integration/daemon_process.h"

namespace collective::testing {

inline constexpr absl::Duration kRawTimeout = absl::Seconds(10);

// A stub on a channel of its own (its own connection, as a separate process
// would have).
std::unique_ptr<v1::CollectiveService::Stub> NewRawStub(const std::string& socket);

// A RegisterRequest that the daemon accepts.
v1::RegisterRequest RawRegisterRequest(int32_t local_rank, int32_t local_size,
                                       uint64_t arena_bytes = 1 << 20,
                                       const std::string& job_id = "raw");

// One Register call; the gRPC status as an absl::Status when it fails.
absl::StatusOr<v1::RegisterResponse> CallRegister(const std::string& socket,
                                                  const v1::RegisterRequest& request,
                                                  absl::Duration timeout = kRawTimeout);

// Registers every local rank of a job of `local_size` concurrently (each
// Register blocks until the job forms); the responses in rank order.
absl::StatusOr<std::vector<v1::RegisterResponse>> RegisterJob(const std::string& socket,
                                                              int32_t local_size,
                                                              uint64_t arena_bytes = 1 << 20,
                                                              const std::string& job_id = "raw");

// A Session stream (sync API). A thread of its own reads the daemon's
// messages into a queue, so that every read can have a deadline.
class RawSession {
 public:
  explicit RawSession(const std::string& socket);
  // Cancels the stream if the daemon has not ended it.
  ~RawSession();
  RawSession(const RawSession&) = delete;
  RawSession& operator=(const RawSession&) = delete;

  bool Write(const v1::ClientMessage& message);
  bool SendAttach(uint64_t client_id, const std::string& token);
  // Half-closes the stream (the daemon sees the client's side end).
  void WritesDone();
  // Ends the stream from this side, as a dying client would.
  void Cancel();
  // Stops taking the daemon's messages off the stream (after the one a read
  // in progress gets), as a client that never reads would; Resume reads on.
  void PauseReading();
  void ResumeReading();
  // How many messages the reader has taken off the stream so far.
  size_t MessagesRead();

  // The next message from the daemon; nullopt at the deadline or once the
  // daemon has ended the stream and every message was taken.
  std::optional<v1::DaemonMessage> Next(absl::Duration timeout = kRawTimeout);
  // The first message of the given kind, leaving others queued; nullopt as
  // above.
  std::optional<v1::DaemonMessage> NextOf(v1::DaemonMessage::BodyCase kind,
                                          absl::Duration timeout = kRawTimeout);
  // Waits until the daemon ends the stream and returns its final status;
  // DEADLINE_EXCEEDED (as an absl::Status) when it has not by the deadline.
  absl::StatusOr<grpc::Status> AwaitEnd(absl::Duration timeout = kRawTimeout);
  // For assertion messages: how the stream ended, or that it is still open.
  std::string DescribeEnd(absl::Duration timeout = absl::Seconds(1));

 private:
  void ReadLoop();

  std::unique_ptr<v1::CollectiveService::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ClientMessage, v1::DaemonMessage>> stream_;
  std::thread reader_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<v1::DaemonMessage> messages_;
  bool ended_ = false;
  bool paused_ = false;
  bool closing_ = false;  // the destructor runs: the reader stops pausing
  size_t read_ = 0;
  std::optional<grpc::Status> final_status_;
  // Finish had to be cancelled: reads had stopped without the daemon ending
  // the call.
  bool unparsed_ = false;
};

// A registered and attached client: its segment, the job's result and
// doorbell segments and its session.
class RawClient {
 public:
  // Maps the segments named in `response`, opens a session and attaches.
  static absl::StatusOr<std::unique_ptr<RawClient>> Attach(const std::string& socket,
                                                           v1::RegisterResponse response);
  // RegisterJob, then Attach for each rank.
  static absl::StatusOr<std::vector<std::unique_ptr<RawClient>>> JoinJob(
      const std::string& socket, int32_t local_size, uint64_t arena_bytes = 1 << 20,
      const std::string& job_id = "raw");

  const v1::RegisterResponse& registration() const { return registration_; }
  int32_t rank() const { return registration_.topology().rank(); }
  shm::ClientSegment& segment() { return *segment_; }
  const shm::ResultSegment& results() const { return *results_; }
  RawSession& session() { return *session_; }

  // Publishes the requests as one Submit message in the segment's
  // submission ring (the daemon's only way in for them), with any pending
  // releases; false when the ring is full.
  bool Submit(const std::vector<v1::TensorRequest>& requests);
  // Publishes `message` in the submission ring with any pending releases
  // added; false when the ring is full.
  bool Send(v1::ClientMessage message);

  // The next completion record with its text (a failure's message), waiting
  // on the ring's futex word.
  std::optional<shm::Completion> NextCompletion(absl::Duration timeout = kRawTimeout);
  // The same, for a test that needs the record only.
  std::optional<shm::CompletionRecord> NextRecord(absl::Duration timeout = kRawTimeout);
  // Whether no record is waiting.
  bool RingEmpty() const { return ring_.Empty(); }

  // Copies a completed request's result out of the result segment and
  // queues its release for the next message.
  std::vector<std::byte> TakeResult(const shm::CompletionRecord& record);

  // Sends Leave on the stream, half-closes, and waits for the daemon to end
  // the stream.
  absl::Status Leave(absl::Duration timeout = kRawTimeout);

 private:
  RawClient(v1::RegisterResponse registration, std::unique_ptr<shm::ClientSegment> segment,
            std::unique_ptr<shm::ResultSegment> results,
            std::unique_ptr<shm::DoorbellSegment> doorbell, std::unique_ptr<RawSession> session);

  v1::RegisterResponse registration_;
  std::unique_ptr<shm::ClientSegment> segment_;
  std::unique_ptr<shm::ResultSegment> results_;
  std::unique_ptr<shm::DoorbellSegment> doorbell_;
  std::unique_ptr<RawSession> session_;
  shm::RingConsumer ring_;
  shm::SubmissionWriter submissions_;
  std::vector<uint64_t> releases_;
};

// A float32 allreduce (sum) of `count` elements at `offset` in the arena.
v1::TensorRequest FloatAllreduce(uint64_t request_id, const std::string& name, uint64_t offset,
                                 int64_t count);

// Runs one float32 sum allreduce of `count` elements across `clients`
// (rank r contributes r + 1 + i at element i) and checks every rank's
// result. "" on success, else what went wrong.
std::string CheckAllreduce(const std::vector<RawClient*>& clients, uint64_t request_id,
                           const std::string& name, int64_t count = 257);

// Stops the daemon and returns "" if it answered Status first, exited
// cleanly, wrote nothing to stderr that looks like a crash, and left no
// segment behind; else what went wrong (and removes what it left).
std::string StopAndCheck(DaemonProcess& daemon);

}  // namespace collective::testing
