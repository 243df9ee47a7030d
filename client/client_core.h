// The state behind a collective::Client, shared with the Buffers and Results
// it hands out (a view keeps the mappings alive): the session with the
// daemon, the two mapped segments, the arena allocator, the submission ring
// (requests and releases go to the daemon through shared memory, a few
// hundred nanoseconds each, where a gRPC message costs tens of microseconds),
// and the table of requests in flight with the wait loop over the completion
// ring. A request is done when its record is taken from the ring; a failed
// one's text comes with the record. Any thread; one mutex guards the state.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/cuda_registry.h"
#include "client/session.h"
#include "client/submission_outbox.h"
#include "collective/client.h"
#include "shm/arena_allocator.h"
#include "shm/client_segment.h"
#include "shm/completion_ring.h"
#include "shm/doorbell_segment.h"
#include "shm/result_segment.h"

namespace collective::internal {

// A CUDA tensor's memory and stream, resolved into registered allocations
// and an event slot when it is submitted (under the core's lock).
struct CudaTensor {
  const void* input = nullptr;
  void* output = nullptr;
  uint64_t output_bytes = 0;
  void* stream = nullptr;
};

// A request ready to go: everything but its id (and group).
struct PreparedRequest {
  v1::TensorRequest request;
  std::optional<CudaTensor> cuda;
  // Arena block holding a copy of the input, freed when the request
  // completes; kNoStaging when the input lies in the arena already.
  uint64_t staging = ~uint64_t{0};
  void* output = nullptr;
  uint64_t output_capacity = 0;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
};

// A request whose completion has been waited for.
struct FinishedRequest {
  shm::CompletionRecord record;
  void* output = nullptr;
  uint64_t output_capacity = 0;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
};

// When something happened, for the daemon's timeline; zero: not measured.
struct Span {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
};

class ClientCore final : public SessionListener, public std::enable_shared_from_this<ClientCore> {
 public:
  // Registers, maps the segments and attaches the session.
  static absl::StatusOr<std::shared_ptr<ClientCore>> Connect(const ClientOptions& options,
                                                             Topology* topology);
  ~ClientCore() override;

  // Arena blocks. Allocate waits while inputs in flight occupy the space;
  // TryAllocate fails at once (RESOURCE_EXHAUSTED) when no block is free.
  absl::StatusOr<uint64_t> Allocate(size_t bytes);
  absl::StatusOr<uint64_t> TryAllocate(size_t bytes);
  void Free(uint64_t offset);
  std::byte* arena() const { return segment_->arena(); }
  uint64_t arena_bytes() const { return segment_->arena_bytes(); }
  uint64_t ArenaFreeBytes() const;
  // The arena offset of [data, data + bytes) if it lies inside the arena.
  std::optional<uint64_t> ArenaOffset(const void* data, size_t bytes) const;

  // Submits requests in one message; more than one (or `grouped`) makes
  // them a group, run together. Staging blocks belong to the core from here
  // on, also on failure.
  static constexpr uint64_t kNoStaging = ~uint64_t{0};
  absl::StatusOr<std::vector<uint64_t>> Submit(std::vector<PreparedRequest> requests, bool grouped);

  bool Poll(uint64_t request_id);
  // A CUDA request's wait also makes its stream wait for the daemon's done
  // event: what the stream does next sees the result.
  absl::StatusOr<FinishedRequest> Wait(uint64_t request_id, absl::Duration timeout);

  // CUDA allocations, registered with the daemon (and answered) now rather
  // than with the first request that uses them.
  absl::Status RegisterDeviceMemory(const void* pointer);
  absl::Status UnregisterDeviceMemory(const void* pointer);

  // Results.
  const std::byte* results() const { return results_->data(); }
  uint64_t results_bytes() const { return results_->data_bytes(); }
  // `copy_out` is when this client copied the result out, for the timeline.
  void Release(uint64_t request_id, uint64_t bytes, Span copy_out = Span{});
  // Whether a timeline records (then Wait reports its copy-outs).
  bool timeline_active() const;

  // Process sets this client knows (every change is a collective it took part
  // in). Any thread.
  std::vector<ProcessSet> ProcessSets() const;
  absl::StatusOr<ProcessSet> FindProcessSet(int32_t id) const;
  void AddProcessSet(ProcessSet set);
  void ForgetProcessSet(int32_t id);
  int rank() const { return rank_; }

  // The timeline of this client's job alone.
  absl::StatusOr<v1::TimelineResponse> Timeline(v1::TimelineRequest request);

  const v1::Limits& limits() const { return limits_; }
  // Whether the daemon takes CUDA tensors (RegisterResponse.gpu_path).
  bool daemon_gpu_path() const { return daemon_gpu_path_; }
  absl::Status Leave();

  // SessionListener
  void OnJobFailed(absl::Status status) override;
  void OnCudaRegistered(uint64_t registration_id, absl::Status status) override;
  void OnSessionEnded(absl::Status status) override;

 private:
  // A tensor's name within its process set: names are unique per set (as
  // in Horovod, whose sets queue their tensors apart).
  using SetName = std::pair<int32_t, std::string>;

  struct Pending {
    SetName name;
    uint64_t staging = kNoStaging;
    void* output = nullptr;
    uint64_t output_capacity = 0;
    DataType dtype = DataType::kFloat32;
    std::vector<int64_t> shape;
    // Set when its record is taken from the ring: the request is done.
    std::optional<shm::CompletionRecord> record;
    absl::Status failure;  // a failed record's code and text
    // CUDA requests: the event slot and the stream that waits on it.
    std::optional<uint32_t> cuda_slot;
    void* stream = nullptr;
  };

  ClientCore(std::unique_ptr<Session> session, const ClientOptions& options);

  // Moves every published completion into the table. Caller holds mutex_.
  void DrainLocked();
  // The outbox's wait while the submission ring is full. Caller holds
  // mutex_ (as `lock`).
  absl::Status WaitForRingRoom(std::unique_lock<std::mutex>& lock);
  // OK, or why the session can no longer complete anything. Caller holds mutex_.
  absl::Status BrokenLocked();
  // The CUDA registry, created at the first CUDA tensor. Caller holds mutex_.
  absl::StatusOr<CudaRegistry*> CudaLocked();
  // Resolves a CUDA request's memory (new allocations go into
  // `registration`), takes an event slot and records the ready event.
  absl::Status PrepareCudaLocked(PreparedRequest& prepared, v1::RegisterCuda& registration);
  // Sends `registration` if it registers anything. Caller holds mutex_.
  absl::Status PushRegistrationLocked(v1::RegisterCuda registration,
                                      std::unique_lock<std::mutex>& lock);
  // A CUDA request is over for the client: its slot is free (after its
  // stream waited on the done event, if it succeeded).
  absl::Status FinishCudaLocked(Pending& pending, bool succeeded);
  // Spins briefly, then sleeps on the futex until the wake word moves past
  // `snapshot` or the deadline (at most a bounded slice, to recheck the
  // daemon's heartbeat).
  void WaitForActivity(uint32_t snapshot, absl::Time deadline);

  const ClientOptions options_;
  std::unique_ptr<Session> session_;
  std::unique_ptr<shm::ClientSegment> segment_;
  std::unique_ptr<shm::ResultSegment> results_;
  std::unique_ptr<shm::DoorbellSegment> doorbell_;
  std::unique_ptr<shm::RingConsumer> ring_;
  std::unique_ptr<SubmissionOutbox> outbox_;  // guarded by mutex_
  v1::Limits limits_;
  bool daemon_gpu_path_ = false;
  // Every rank and daemon engine of the job on this machine has a core: a
  // waiter spins (kSpin) before it sleeps, not yields its core in a loop
  // (kYield).
  bool core_each_ = false;
  // How long a waiter spins or yields before it sleeps (client_core.cc).
  absl::Duration busy_wait_;

  // One submission (or CUDA registration) at a time, from building its
  // message to pushing it: a push lets go of mutex_ while the ring is full,
  // and another thread must not take the next request ids or push a request
  // naming CUDA memory whose registration still waits. (Releases need no
  // such turn: the outbox publishes each exactly once whatever interleaves.)
  // Taken before mutex_.
  std::mutex submit_mutex_;
  mutable std::mutex mutex_;
  shm::ArenaAllocator allocator_{0, shm::kDataAlignment};
  uint64_t next_request_id_ = 1;
  absl::flat_hash_map<uint64_t, Pending> requests_;
  absl::flat_hash_set<SetName> outstanding_names_;
  size_t in_flight_ = 0;  // submitted, no record yet
  absl::Status job_failure_;
  absl::Status session_failure_;
  bool left_ = false;
  uint64_t next_group_id_ = 1;
  int rank_ = 0;
  std::map<int32_t, ProcessSet> process_sets_;  // guarded by mutex_
  std::unique_ptr<CudaRegistry> cuda_;          // guarded by mutex_
  // Answers to explicit CUDA registrations, by registration id.
  uint64_t next_registration_ = 1;
  absl::flat_hash_map<uint64_t, absl::Status> cuda_answers_;  // guarded by mutex_
};

}  // namespace collective::internal
