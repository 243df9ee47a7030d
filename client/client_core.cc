#include "client/client_core.h"

#include <utility>

#include <sched.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "collective/build_config.h"
#include "common/clock.h"
#include "common/dtype.h"
#include "common/duplicate_name.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "shm/segment_layout.h"

namespace collective::internal {
namespace {

// Waiting spins this long before it sleeps when the job's local ranks and
// the daemon's engine thread each have a core: long enough to catch a small
// collective that completes at once (4-byte allreduce, one rank and its
// daemon on 2 cores: 6 us instead of 22-28 us). Otherwise the spin only
// steals the core the daemon needs (2 ranks on 2 cores: 82-97 us with it).
constexpr absl::Duration kSpin = absl::Microseconds(30);
// Where they do not, a waiter yields its core in a loop this long before it
// sleeps: the daemon and the other ranks run in its place, and a result that
// lands meanwhile is seen at the next turn without a futex wake-up (4-byte
// allreduce on 2 cores, 2 ranks: 15-21 us instead of 42-59 us sleeping at
// once; 4 ranks: 35-50 us instead of 89-103 us; the ResNet-50 gradient set
// and the optimizer step unchanged).
constexpr absl::Duration kYield = absl::Microseconds(50);
// The same in a job across nodes, whose small steps take 100-200 us there:
// a waiter that slept after 50 us needed the engine's futex wake-up, and
// then waited for a core that another busy thread held (2 stand-in nodes of
// 2 ranks on 2 cores, 4-byte allreduce: 123 us instead of 172 us, 1.12x
// MPI's instead of 1.76x, medians of 8 alternating runs; with one rank per
// node, where each rank shares its core with the other node's engine,
// 91 us instead of 77 us).
constexpr absl::Duration kYieldAcrossNodes = absl::Microseconds(200);
// Sleeps are cut into slices so that a hung daemon is noticed.
constexpr absl::Duration kSleepSlice = absl::Milliseconds(100);

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// CPUs this process may run on (its affinity mask, which containers narrow).
int UsableCpus() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

}  // namespace

ClientCore::ClientCore(std::unique_ptr<Session> session, const ClientOptions& options)
    : options_(options), session_(std::move(session)) {}

ClientCore::~ClientCore() {
  // The session calls back into this object until it is gone; end it while
  // every member is still alive.
  session_.reset();
}

absl::StatusOr<std::shared_ptr<ClientCore>> ClientCore::Connect(const ClientOptions& options,
                                                                Topology* topology) {
  auto session = std::make_unique<Session>(options.socket_path);
  if (options.connect_timeout > absl::ZeroDuration()) {
    RETURN_IF_ERROR(session->AwaitDaemon(options.connect_timeout));
  }
  v1::RegisterRequest request;
  request.set_job_id(options.job_id);
  request.set_local_rank(options.local_rank);
  request.set_local_size(options.local_size);
  request.set_arena_bytes(options.arena_bytes);
  request.set_pid(::getpid());
  request.set_layout_version(shm::kLayoutVersion);
  request.set_client_version(COLLECTIVE_VERSION);
  request.set_timeline_path(options.timeline_file);
  request.set_timeline_mark_cycles(options.timeline_mark_cycles);
  if (!options.rendezvous.empty()) {
    v1::JobRendezvous& rendezvous = *request.mutable_rendezvous();
    rendezvous.set_address(options.rendezvous);
    rendezvous.set_node(options.node);
    rendezvous.set_nodes(options.nodes);
  }
  for (const std::vector<int>& ranks : options.static_process_sets) {
    v1::ProcessSet* set = request.add_static_process_sets();
    for (int rank : ranks) set->add_ranks(rank);
  }
  ASSIGN_OR_RETURN(
      const v1::RegisterResponse response,
      session->Register(request, options.register_timeout, options.cancellation.get()));

  std::shared_ptr<ClientCore> core(new ClientCore(std::move(session), options));
  auto segment = shm::ClientSegment::Open(response.arena().name(), response.arena().size_bytes(),
                                          response.epoch(), response.client_id());
  auto results = shm::ResultSegment::OpenReadOnly(
      response.results().name(), response.results().size_bytes(), response.epoch());
  auto doorbell = shm::DoorbellSegment::Open(response.doorbell().name(),
                                             response.doorbell().size_bytes(), response.epoch());
  if (!segment.ok() || !results.ok() || !doorbell.ok()) {
    // Attach and drop the session at once: the daemon then tells the other
    // ranks right away that this one is gone, instead of at a deadline.
    (void)core->session_->Attach(response.client_id(), response.session_token(), core.get(),
                                 absl::Seconds(5));
    return Annotate(!segment.ok()   ? segment.status()
                    : !results.ok() ? results.status()
                                    : doorbell.status(),
                    "cannot map the daemon's shared memory");
  }
  core->segment_ = std::move(*segment);
  core->results_ = std::move(*results);
  core->doorbell_ = std::move(*doorbell);
  core->ring_ = std::make_unique<shm::RingConsumer>(*core->segment_);
  // Queued releases go on their own once they free an eighth of the result
  // space, which the daemon may be waiting for.
  core->outbox_ = std::make_unique<SubmissionOutbox>(
      shm::SubmissionWriter(core->segment_->header(), core->segment_->submit_ring(),
                            core->segment_->submit_bytes(), core->doorbell_->word()),
      core->results_->data_bytes() / 8, [raw = core.get()](std::unique_lock<std::mutex>& lock) {
        return raw->WaitForRingRoom(lock);
      });
  core->allocator_ = shm::ArenaAllocator(core->segment_->arena_bytes(), shm::kDataAlignment);
  core->limits_ = response.limits();
  core->daemon_gpu_path_ = response.gpu_path();
  const int32_t busy_threads = response.busy_threads_on_host() > 0
                                   ? response.busy_threads_on_host()
                                   : response.topology().local_size() + 1;
  core->core_each_ = busy_threads <= UsableCpus();
  const v1::Topology& wire = response.topology();
  core->busy_wait_ = core->core_each_ ? kSpin : wire.cross_size() > 1 ? kYieldAcrossNodes : kYield;

  *topology =
      Topology{wire.rank(),       wire.size(),       wire.local_rank(),    wire.local_size(),
               wire.cross_rank(), wire.cross_size(), wire.is_homogeneous()};
  core->rank_ = wire.rank();
  ProcessSet global{.id = kGlobalProcessSet, .ranks = {}};
  for (int rank = 0; rank < wire.size(); ++rank) global.ranks.push_back(rank);
  core->process_sets_[kGlobalProcessSet] = std::move(global);
  for (const v1::ProcessSet& set : response.process_sets()) {
    core->process_sets_[set.id()] =
        ProcessSet{.id = set.id(), .ranks = {set.ranks().begin(), set.ranks().end()}};
  }
  RETURN_IF_ERROR(core->session_->Attach(response.client_id(), response.session_token(), core.get(),
                                         absl::Seconds(30)));
  return core;
}

std::optional<uint64_t> ClientCore::ArenaOffset(const void* data, size_t bytes) const {
  const auto* begin = static_cast<const std::byte*>(data);
  const std::byte* arena_begin = segment_->arena();
  if (begin < arena_begin || begin > arena_begin + segment_->arena_bytes()) return std::nullopt;
  const uint64_t offset = static_cast<uint64_t>(begin - arena_begin);
  if (bytes > segment_->arena_bytes() - offset) return std::nullopt;
  return offset;
}

absl::StatusOr<uint64_t> ClientCore::Allocate(size_t bytes) {
  if (bytes > allocator_.capacity()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        bytes, " bytes do not fit this client's shared-memory arena of ", allocator_.capacity(),
        " bytes (raise ClientOptions::arena_bytes or COLLECTIVE_ARENA_BYTES)"));
  }
  while (true) {
    const uint32_t snapshot = ring_->WakeWord();
    {
      std::lock_guard lock(mutex_);
      DrainLocked();
      if (auto offset = allocator_.Allocate(bytes)) return *offset;
      RETURN_IF_ERROR(session_failure_);
      if (in_flight_ == 0) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "this client's shared-memory arena is full: ", allocator_.bytes_in_use(), " of ",
            allocator_.capacity(), " bytes are held by buffers, and no request in flight will ",
            "free any; ", bytes, " more bytes were asked for"));
      }
    }
    // Inputs staged for requests in flight are freed as they complete.
    WaitForActivity(snapshot, absl::InfiniteFuture());
  }
}

absl::StatusOr<uint64_t> ClientCore::TryAllocate(size_t bytes) {
  std::lock_guard lock(mutex_);
  DrainLocked();
  if (auto offset = allocator_.Allocate(bytes)) return *offset;
  RETURN_IF_ERROR(session_failure_);
  return absl::ResourceExhaustedError(absl::StrCat("no block of ", bytes,
                                                   " bytes is free in this client's "
                                                   "shared-memory arena now (",
                                                   allocator_.bytes_in_use(), " of ",
                                                   allocator_.capacity(), " bytes are held)"));
}

uint64_t ClientCore::ArenaFreeBytes() const {
  std::lock_guard lock(mutex_);
  return allocator_.capacity() - allocator_.bytes_in_use();
}

void ClientCore::Free(uint64_t offset) {
  std::lock_guard lock(mutex_);
  allocator_.Free(offset);
}

absl::StatusOr<std::vector<uint64_t>> ClientCore::Submit(std::vector<PreparedRequest> requests,
                                                         bool grouped) {
  const std::lock_guard submitting(submit_mutex_);
  std::unique_lock lock(mutex_);
  auto refuse = [&](absl::Status status) {
    for (const PreparedRequest& prepared : requests) {
      if (prepared.staging != kNoStaging) allocator_.Free(prepared.staging);
    }
    return status;
  };
  const size_t count = requests.size();
  while (true) {
    if (left_) return refuse(absl::FailedPreconditionError("this client has left its job"));
    if (!session_failure_.ok()) return refuse(session_failure_);
    if (!job_failure_.ok()) return refuse(job_failure_);
    absl::flat_hash_set<SetName> names;
    for (const PreparedRequest& prepared : requests) {
      if (IsPointToPoint(prepared.request.collective())) continue;
      SetName name{prepared.request.process_set_id(), prepared.request.name()};
      if (outstanding_names_.contains(name) || !names.insert(name).second) {
        return refuse(DuplicateNameError(name.second, "this rank"));
      }
    }
    if (in_flight_ + count <= limits_.max_outstanding_requests()) break;
    if (count > limits_.max_outstanding_requests()) {
      return refuse(absl::InvalidArgumentError(
          absl::StrCat("a group of ", count, " tensors exceeds the daemon's limit of ",
                       limits_.max_outstanding_requests(), " outstanding requests")));
    }
    // Too many in flight: wait for completions, as the daemon would refuse.
    const uint32_t snapshot = ring_->WakeWord();
    lock.unlock();
    WaitForActivity(snapshot, absl::InfiniteFuture());
    lock.lock();
    DrainLocked();
  }
  v1::ClientMessage message;
  // CUDA tensors: their allocations (new ones are registered in this same
  // message, ahead of its requests), event slots, ready events.
  v1::RegisterCuda registration;
  std::vector<std::optional<uint32_t>> slots(count);
  absl::Status cuda_status;
  for (size_t i = 0; i < count && cuda_status.ok(); ++i) {
    if (!requests[i].cuda.has_value()) continue;
    cuda_status = PrepareCudaLocked(requests[i], registration);
    if (cuda_status.ok()) slots[i] = requests[i].request.event_slot();
  }
  const auto release_slots = [&] {
    for (const std::optional<uint32_t>& slot : slots) {
      if (slot.has_value()) cuda_->ReleaseSlot(*slot);
    }
  };
  if (!cuda_status.ok()) {
    release_slots();
    // What the registry counts as registered must reach the daemon.
    (void)PushRegistrationLocked(std::move(registration), lock);
    return refuse(cuda_status);
  }
  if (registration.allocations_size() > 0 || registration.ready_events_size() > 0 ||
      registration.unregister_size() > 0) {
    *message.mutable_cuda() = std::move(registration);
  }
  std::vector<uint64_t> ids;
  const uint64_t group_id = grouped || count > 1 ? next_group_id_++ : 0;
  for (PreparedRequest& prepared : requests) {
    const uint64_t request_id = next_request_id_ + ids.size();
    ids.push_back(request_id);
    v1::TensorRequest* request = message.mutable_submit()->add_requests();
    *request = std::move(prepared.request);
    request->set_request_id(request_id);
    if (group_id != 0) {
      request->set_group_id(group_id);
      request->set_group_size(static_cast<uint32_t>(count));
    }
  }
  if (absl::Status pushed = outbox_->Push(message, lock); !pushed.ok()) {
    release_slots();
    // The registry counts what the message registered as known.
    if (message.has_cuda()) (void)PushRegistrationLocked(message.cuda(), lock);
    return refuse(pushed);
  }
  next_request_id_ += count;
  for (size_t i = 0; i < count; ++i) {
    PreparedRequest& prepared = requests[i];
    const v1::TensorRequest& sent = message.submit().requests(static_cast<int>(i));
    SetName name{sent.process_set_id(), sent.name()};
    if (!IsPointToPoint(sent.collective())) outstanding_names_.insert(name);
    ++in_flight_;
    requests_.emplace(ids[i], Pending{.name = name,
                                      .staging = prepared.staging,
                                      .output = prepared.output,
                                      .output_capacity = prepared.output_capacity,
                                      .dtype = prepared.dtype,
                                      .shape = std::move(prepared.shape),
                                      .record = std::nullopt,
                                      .failure = absl::OkStatus(),
                                      .cuda_slot = slots[i],
                                      .stream = prepared.cuda ? prepared.cuda->stream : nullptr});
  }
  return ids;
}

absl::Status ClientCore::WaitForRingRoom(std::unique_lock<std::mutex>& lock) {
  // The engine is awake (the outbox rang); completions it publishes end
  // this wait early.
  RETURN_IF_ERROR(BrokenLocked());
  const uint32_t snapshot = ring_->WakeWord();
  lock.unlock();
  ring_->BeginSleep();
  ring_->Sleep(snapshot, absl::Milliseconds(1));
  ring_->EndSleep();
  lock.lock();
  return absl::OkStatus();
}

void ClientCore::DrainLocked() {
  while (auto completion = ring_->TryPop()) {
    const shm::CompletionRecord& record = completion->record;
    if ((record.flags & shm::kRecordRefusedDuplicateId) != 0) {
      // Not this client's doing (it never reuses an id in flight); the
      // request with the id goes on.
      log::Client().warn("collectived refused a submission: {}", completion->text);
      continue;
    }
    auto it = requests_.find(record.request_id);
    if (it == requests_.end() || it->second.record.has_value()) {
      log::Client().warn("collectived completed request {}, which is not in flight",
                         record.request_id);
      continue;
    }
    Pending& pending = it->second;
    pending.record = record;
    if (pending.staging != kNoStaging) {
      allocator_.Free(pending.staging);
      pending.staging = kNoStaging;
    }
    outstanding_names_.erase(pending.name);
    --in_flight_;
    if (record.status_code != 0) {
      pending.failure = absl::Status(
          StatusCodeFromInt(record.status_code),
          completion->text.empty()
              ? absl::StrCat("collectived failed request ", record.request_id,
                             "; its message did not fit the segment's text ring (this client "
                             "took its earlier completions too late)")
              : std::move(completion->text));
    }
  }
}

absl::Status ClientCore::BrokenLocked() {
  if (!session_failure_.ok()) return session_failure_;
  const uint64_t heartbeat = ring_->daemon_heartbeat_ns();
  const uint64_t now = MonotonicNanos();
  if (heartbeat != 0 && now > heartbeat &&
      absl::Nanoseconds(now - heartbeat) > options_.daemon_timeout) {
    session_failure_ = absl::UnavailableError(
        absl::StrCat("collectived stopped responding: no heartbeat for ",
                     absl::FormatDuration(absl::Nanoseconds(now - heartbeat))));
  }
  return session_failure_;
}

bool ClientCore::Poll(uint64_t request_id) {
  std::lock_guard lock(mutex_);
  DrainLocked();
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return true;  // Wait reports the unknown handle
  if (!BrokenLocked().ok()) return true;
  return it->second.record.has_value();
}

absl::StatusOr<FinishedRequest> ClientCore::Wait(uint64_t request_id, absl::Duration timeout) {
  const absl::Time deadline =
      timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
  while (true) {
    const uint32_t snapshot = ring_->WakeWord();
    {
      std::lock_guard lock(mutex_);
      DrainLocked();
      auto it = requests_.find(request_id);
      if (it == requests_.end()) {
        return absl::InvalidArgumentError(absl::StrCat("unknown request handle ", request_id,
                                                       " (each handle can be waited for once)"));
      }
      Pending& pending = it->second;
      const absl::Status broken = BrokenLocked();
      if (pending.record.has_value()) {
        const shm::CompletionRecord record = *pending.record;
        if (record.status_code == 0) {
          const absl::Status waited = FinishCudaLocked(pending, /*succeeded=*/true);
          FinishedRequest finished{record, pending.output, pending.output_capacity, pending.dtype,
                                   std::move(pending.shape)};
          requests_.erase(it);
          if (!waited.ok()) return waited;
          return finished;
        }
        absl::Status failure = std::move(pending.failure);
        (void)FinishCudaLocked(pending, /*succeeded=*/false);
        requests_.erase(it);
        return failure;
      }
      if (!broken.ok()) {
        // Nobody will read the input any more: its staging can go.
        if (pending.staging != kNoStaging) allocator_.Free(pending.staging);
        (void)FinishCudaLocked(pending, /*succeeded=*/false);
        outstanding_names_.erase(pending.name);
        --in_flight_;
        requests_.erase(it);
        return broken;
      }
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "request ", request_id, " did not complete within ", absl::FormatDuration(timeout)));
    }
    WaitForActivity(snapshot, deadline);
  }
}

void ClientCore::WaitForActivity(uint32_t snapshot, absl::Time deadline) {
  const absl::Time busy_until = std::min(deadline, absl::Now() + busy_wait_);
  while (absl::Now() < busy_until) {
    if (ring_->WakeWord() != snapshot || !ring_->Empty()) return;
    if (core_each_) {
      for (int i = 0; i < 16; ++i) CpuRelax();
    } else {
      ::sched_yield();
    }
  }
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return;
  ring_->BeginSleep();
  ring_->Sleep(snapshot, std::min(left, kSleepSlice));
  ring_->EndSleep();
}

void ClientCore::Release(uint64_t request_id, uint64_t bytes, Span copy_out) {
  std::unique_lock lock(mutex_);
  if (left_ || !session_failure_.ok()) return;
  std::optional<v1::CopyOutSpan> span;
  if (copy_out.end_ns != 0) {
    span.emplace();
    span->set_request_id(request_id);
    span->set_start_ns(copy_out.start_ns);
    span->set_end_ns(copy_out.end_ns);
  }
  // A failed push leaves the release queued; the session's end (which
  // releases everything) is what makes it fail.
  (void)outbox_->Release(request_id, bytes, std::move(span), lock);
}

absl::StatusOr<CudaRegistry*> ClientCore::CudaLocked() {
  if (cuda_ != nullptr) return cuda_.get();
  ASSIGN_OR_RETURN(const cuda::Driver* driver, cuda::LoadDriver());
  ASSIGN_OR_RETURN(cuda_, CudaRegistry::Create(*driver, limits_.max_outstanding_requests()));
  return cuda_.get();
}

absl::Status ClientCore::PrepareCudaLocked(PreparedRequest& prepared,
                                           v1::RegisterCuda& registration) {
  ASSIGN_OR_RETURN(CudaRegistry * cuda, CudaLocked());
  if (registration.device_uuid().empty()) registration = cuda->NewMessage();
  const CudaTensor& tensor = *prepared.cuda;
  v1::TensorRequest& request = prepared.request;
  const std::string what = absl::StrCat("tensor '", request.name(), "'");
  ASSIGN_OR_RETURN_WITH(*request.mutable_device_input(),
                        cuda->Locate(tensor.input, request.length(), registration),
                        absl::StrCat(what, "'s input"));
  ASSIGN_OR_RETURN_WITH(*request.mutable_device_output(),
                        cuda->Locate(tensor.output, tensor.output_bytes, registration),
                        absl::StrCat(what, "'s output"));
  ASSIGN_OR_RETURN(const auto slot, cuda->AcquireSlot(registration));
  request.set_event_slot(slot.first);
  request.set_event_sequence(slot.second);
  if (absl::Status recorded = cuda->RecordReady(slot.first, tensor.stream); !recorded.ok()) {
    cuda->ReleaseSlot(slot.first);
    return Annotate(recorded, what);
  }
  return absl::OkStatus();
}

absl::Status ClientCore::PushRegistrationLocked(v1::RegisterCuda registration,
                                                std::unique_lock<std::mutex>& lock) {
  if (registration.allocations_size() == 0 && registration.ready_events_size() == 0 &&
      registration.unregister_size() == 0 && registration.registration_id() == 0) {
    return absl::OkStatus();
  }
  v1::ClientMessage message;
  *message.mutable_cuda() = std::move(registration);
  return outbox_->Push(message, lock);
}

absl::Status ClientCore::FinishCudaLocked(Pending& pending, bool succeeded) {
  if (!pending.cuda_slot.has_value() || cuda_ == nullptr) return absl::OkStatus();
  absl::Status waited;
  if (succeeded) waited = cuda_->WaitDone(*pending.cuda_slot, pending.stream);
  cuda_->ReleaseSlot(*pending.cuda_slot);
  pending.cuda_slot.reset();
  return waited;
}

absl::Status ClientCore::RegisterDeviceMemory(const void* pointer) {
  uint64_t id = 0;
  {
    const std::lock_guard submitting(submit_mutex_);
    std::unique_lock lock(mutex_);
    RETURN_IF_ERROR(BrokenLocked());
    ASSIGN_OR_RETURN(CudaRegistry * cuda, CudaLocked());
    v1::RegisterCuda registration = cuda->NewMessage();
    RETURN_IF_ERROR(cuda->Locate(pointer, 0, registration).status());
    id = next_registration_++;
    registration.set_registration_id(id);
    RETURN_IF_ERROR(PushRegistrationLocked(std::move(registration), lock));
  }
  // The daemon answers on the session stream.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (true) {
    const uint32_t snapshot = ring_->WakeWord();
    {
      std::lock_guard lock(mutex_);
      auto answer = cuda_answers_.find(id);
      if (answer != cuda_answers_.end()) {
        absl::Status status = std::move(answer->second);
        cuda_answers_.erase(answer);
        return Annotate(status, "collectived cannot use the CUDA allocation");
      }
      RETURN_IF_ERROR(BrokenLocked());
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError("collectived did not answer a CUDA registration");
    }
    WaitForActivity(snapshot, deadline);
  }
}

absl::Status ClientCore::UnregisterDeviceMemory(const void* pointer) {
  const std::lock_guard submitting(submit_mutex_);
  std::unique_lock lock(mutex_);
  if (cuda_ == nullptr) return absl::NotFoundError("no CUDA allocation is registered");
  v1::RegisterCuda registration = cuda_->NewMessage();
  RETURN_IF_ERROR(cuda_->Unregister(pointer, registration));
  return PushRegistrationLocked(std::move(registration), lock);
}

void ClientCore::OnCudaRegistered(uint64_t registration_id, absl::Status status) {
  if (registration_id == 0) {
    // Registered along with requests, which fail with the reason if any.
    if (!status.ok()) log::Client().debug("CUDA registration refused: {}", status.message());
    return;
  }
  {
    std::lock_guard lock(mutex_);
    cuda_answers_[registration_id] = std::move(status);
  }
  if (ring_ != nullptr) ring_->WakeLocal();
}

bool ClientCore::timeline_active() const {
  return segment_->header()->timeline_active.load(std::memory_order_relaxed) != 0;
}

std::vector<ProcessSet> ClientCore::ProcessSets() const {
  std::lock_guard lock(mutex_);
  std::vector<ProcessSet> sets;
  for (const auto& [id, set] : process_sets_) sets.push_back(set);
  return sets;
}

absl::StatusOr<ProcessSet> ClientCore::FindProcessSet(int32_t id) const {
  std::lock_guard lock(mutex_);
  const auto it = process_sets_.find(id);
  if (it == process_sets_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("process set ", id, " does not exist"));
  }
  return it->second;
}

void ClientCore::AddProcessSet(ProcessSet set) {
  std::lock_guard lock(mutex_);
  const int32_t id = set.id;
  process_sets_[id] = std::move(set);
}

void ClientCore::ForgetProcessSet(int32_t id) {
  std::lock_guard lock(mutex_);
  process_sets_.erase(id);
}

absl::StatusOr<v1::TimelineResponse> ClientCore::Timeline(v1::TimelineRequest request) {
  // A trainer's timeline is its job's own: on a daemon shared by several
  // jobs it never records another job's tensor names.
  request.set_job_id(options_.job_id);
  return session_->Timeline(request);
}

absl::Status ClientCore::Leave() {
  bool broken;
  {
    std::lock_guard lock(mutex_);
    if (left_) return absl::OkStatus();
    left_ = true;
    broken = !BrokenLocked().ok();
  }
  // A daemon that is gone or hung will not answer the goodbye: do not wait.
  return session_->Leave(broken ? absl::ZeroDuration() : absl::Seconds(5));
}

void ClientCore::OnJobFailed(absl::Status status) {
  {
    std::lock_guard lock(mutex_);
    if (job_failure_.ok()) job_failure_ = std::move(status);
  }
  if (ring_ != nullptr) ring_->WakeLocal();
}

void ClientCore::OnSessionEnded(absl::Status status) {
  {
    std::lock_guard lock(mutex_);
    if (session_failure_.ok()) session_failure_ = std::move(status);
  }
  if (ring_ != nullptr) ring_->WakeLocal();
}

}  // namespace collective::internal
