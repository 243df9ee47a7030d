#include "daemon/engine/registrar.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collective/build_config.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "daemon/engine/mpi_job_world.h"
#include "daemon/engine/world_link.h"
#include "daemon/job/secrets.h"
#include "daemon/observe/job_report.h"
#include "shm/segment_layout.h"

namespace collective::daemon::engine {
namespace {

// The member of lowest local rank, or null while none has registered: what
// a forming job's members must agree on is compared with it.
const job::ClientRecord* FirstMember(const job::Job& job) {
  for (const auto& member : job.members()) {
    if (member) return member.get();
  }
  return nullptr;
}

// Whether the job forms its own world through a rendezvous (its ranks named
// one) rather than on the daemon's world.
bool ThroughRendezvous(const job::Job& job) {
  const job::ClientRecord* first = FirstMember(job);
  return first != nullptr && !first->rendezvous.empty();
}

std::string DescribeSets(const std::vector<std::vector<int32_t>>& sets) {
  if (sets.empty()) return "none";
  std::string text;
  for (const auto& set : sets)
    absl::StrAppend(&text, text.empty() ? "" : ", ", job::RanksString(set));
  return text;
}

constexpr int32_t kMaxLocalSize = 4096;
constexpr size_t kMaxJobIdBytes = 128;

std::string JobIdOf(const v1::RegisterRequest& request) {
  return request.job_id().empty() ? "default" : request.job_id();
}

// The shared memory a run's job holds: its members' arenas and its result
// segment (counted from registration on: the job will need it to form).
uint64_t MemoryOf(const JobRun& run, uint64_t result_arena_bytes) {
  uint64_t bytes = result_arena_bytes;
  for (const auto& member : run.job().members()) {
    if (member) bytes += member->arena_bytes;
  }
  return bytes;
}

// "job 'a' (uid 1000)" or "job 'a' (uids 0, 1000)".
std::string DescribeRun(const JobRun& run) {
  std::vector<uint32_t> uids;
  for (const auto& member : run.job().members()) {
    if (member && std::find(uids.begin(), uids.end(), member->peer.uid) == uids.end()) {
      uids.push_back(member->peer.uid);
    }
  }
  std::sort(uids.begin(), uids.end());
  return absl::StrCat("job '", run.job().id(), "' (uid", uids.size() == 1 ? " " : "s ",
                      absl::StrJoin(uids, ", "), ")");
}

}  // namespace

absl::Status Registrar::CheckRequest(const v1::RegisterRequest& request,
                                     const std::string& job_id) const {
  if (request.layout_version() != shm::kLayoutVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("the client speaks shared-memory layout version ", request.layout_version(),
                     " but this daemon speaks version ", shm::kLayoutVersion,
                     "; use a client library that matches collectived ", COLLECTIVE_VERSION));
  }
  if (request.local_size() < 1 || request.local_size() > kMaxLocalSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("local_size ", request.local_size(), " is outside [1, ", kMaxLocalSize, "]"));
  }
  if (request.local_rank() < 0 || request.local_rank() >= request.local_size()) {
    return absl::InvalidArgumentError(absl::StrCat("local_rank ", request.local_rank(),
                                                   " is outside [0, local_size ",
                                                   request.local_size(), ")"));
  }
  if (job_id.size() > kMaxJobIdBytes || std::any_of(job_id.begin(), job_id.end(), [](char c) {
        return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
      })) {
    return absl::InvalidArgumentError(
        absl::StrCat("the job id must be at most ", kMaxJobIdBytes, " printable bytes"));
  }
  if (request.arena_bytes() > parts_.config.max_arena_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("an arena of ", request.arena_bytes(),
                                                   " bytes exceeds max_arena_bytes (",
                                                   parts_.config.max_arena_bytes, ")"));
  }
  return absl::OkStatus();
}

absl::Status Registrar::CheckAgainstRun(
    const JobRun& run, const v1::RegisterRequest& request,
    const std::vector<std::vector<int32_t>>& static_sets) const {
  const job::Job& job = run.job();
  if (job.state() != job::JobState::kForming) {
    return absl::AlreadyExistsError(absl::StrCat(
        "job '", job.id(), "' is already running with all ", job.local_size(), " local ranks"));
  }
  if (request.local_size() != job.local_size()) {
    const job::ClientRecord* first = FirstMember(job);
    return absl::InvalidArgumentError(
        absl::StrCat("local_size mismatch for job '", job.id(), "': local rank ", first->local_rank,
                     " (pid ", first->peer.pid, ") registered with local_size ", job.local_size(),
                     ", this client says ", request.local_size()));
  }
  if (const job::ClientRecord* taken = job.member(request.local_rank())) {
    return absl::AlreadyExistsError(absl::StrCat("local rank ", request.local_rank(), " of job '",
                                                 job.id(), "' is already registered by pid ",
                                                 taken->peer.pid));
  }
  for (const auto& member : job.members()) {
    if (member && member->static_process_sets != static_sets) {
      return absl::InvalidArgumentError(
          absl::StrCat("static process sets mismatch for job '", job.id(), "': local rank ",
                       member->local_rank, " asked for ", DescribeSets(member->static_process_sets),
                       ", this client asks for ", DescribeSets(static_sets)));
    }
    if (member) break;
  }
  const std::string rendezvous = request.has_rendezvous() ? request.rendezvous().address() : "";
  if (const job::ClientRecord* first = FirstMember(job);
      first != nullptr && first->rendezvous != rendezvous) {
    auto named = [](const std::string& address) {
      return address.empty() ? std::string("none") : absl::StrCat("'", address, "'");
    };
    return absl::InvalidArgumentError(absl::StrCat(
        "rendezvous mismatch for job '", job.id(), "': local rank ", first->local_rank, " named ",
        named(first->rendezvous), ", this client names ", named(rendezvous)));
  }
  return absl::OkStatus();
}

absl::Status Registrar::CheckBudgets(const v1::RegisterRequest& request, const std::string& job_id,
                                     bool new_job) const {
  const config::DaemonConfig& config = parts_.config;
  if (new_job && runs_.size() >= config.max_jobs) {
    std::vector<std::string> serving;
    for (const auto& run : runs_) serving.push_back(DescribeRun(*run));
    return absl::ResourceExhaustedError(
        absl::StrCat("collectived serves ", runs_.size(),
                     " jobs, its limit (max_jobs): ", absl::StrJoin(serving, ", "), "; job '",
                     job_id, "' can register when one of them has ended"));
  }
  if (config.memory_budget_bytes == 0) return absl::OkStatus();
  const uint64_t arena =
      request.arena_bytes() == 0 ? config.default_arena_bytes : request.arena_bytes();
  const uint64_t asked = arena + (new_job ? config.result_arena_bytes : 0);
  uint64_t in_use = 0;
  std::vector<std::string> holders;
  for (const auto& run : runs_) {
    const uint64_t held = MemoryOf(*run, config.result_arena_bytes);
    in_use += held;
    holders.push_back(absl::StrCat(DescribeRun(*run), " holds ", held, " bytes"));
  }
  if (in_use + asked <= config.memory_budget_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "collectived's shared-memory budget (memory_budget_bytes) is ", config.memory_budget_bytes,
      " bytes and ", in_use, " are in use (",
      holders.empty() ? "none" : absl::StrJoin(holders, "; "), "): job '", job_id, "' asks for ",
      asked, " more (an arena of ", arena, " bytes",
      new_job ? absl::StrCat(" and its result segment of ", config.result_arena_bytes, " bytes")
              : std::string(),
      ")"));
}

absl::StatusOr<std::unique_ptr<job::ClientRecord>> Registrar::NewClient(
    const job::RegisterCall& call) {
  const config::DaemonConfig& config = parts_.config;
  const v1::RegisterRequest& request = call.request();
  auto client = std::make_unique<job::ClientRecord>();
  client->id = next_client_id_++;
  client->session_token = job::NewSessionToken();
  client->peer = call.peer();
  client->reported_pid = request.pid();
  client->local_rank = request.local_rank();
  client->registered_at = absl::Now();
  const uint64_t arena_bytes =
      request.arena_bytes() == 0 ? config.default_arena_bytes : request.arena_bytes();
  ASSIGN_OR_RETURN_WITH(
      client->segment,
      shm::ClientSegment::Create({.name = parts_.names.Client(client->id),
                                  .arena_bytes = arena_bytes,
                                  // Room for every outstanding completion plus
                                  // the refusals of a client that exceeds it.
                                  .ring_capacity = 2 * config.max_outstanding_requests,
                                  // Room for the texts of that many failures
                                  // of a typical length, before they are read.
                                  .text_bytes = uint64_t{config.max_outstanding_requests} * 256,
                                  .submit_bytes = uint64_t{config.max_outstanding_requests} * 128,
                                  .epoch = parts_.epoch,
                                  .client_id = client->id,
                                  .client_pid = client->peer.pid,
                                  .owner_uid = client->peer.uid,
                                  .owner_gid = client->peer.gid}),
      "cannot create the client's shared-memory segment");
  client->arena_bytes = client->segment->arena_bytes();
  client->ring = job::SegmentCompletions(*client->segment);
  client->submissions = job::SegmentSubmissions(*client->segment);
  client->guard = job::GuardedRange(client->segment->header(), client->segment->size());
  client->segment->header()->daemon_heartbeat_ns.store(MonotonicNanos(), std::memory_order_relaxed);
  if (!client->guard.guarded()) {
    log::Shm().warn("no SIGBUS guard slot left for client {}; a truncated segment would crash",
                    client->id);
  }
  return client;
}

JobRun* Registrar::Find(const std::string& job_id) const {
  for (const auto& run : runs_) {
    if (run->job().id() == job_id && !run->done()) return run.get();
  }
  return nullptr;
}

void Registrar::Remove(JobRun& run) {
  if (exchanging_ == &run) exchanging_ = nullptr;
  std::erase_if(runs_, [&](const std::unique_ptr<JobRun>& held) { return held.get() == &run; });
}

void Registrar::Register(std::shared_ptr<job::RegisterCall> call, Clock::time_point deadline) {
  const v1::RegisterRequest& request = call->request();
  const std::string job_id = JobIdOf(request);
  // Static sets compare as sets of ranks, in the order the clients list them.
  std::vector<std::vector<int32_t>> static_sets;
  for (const v1::ProcessSet& set : request.static_process_sets()) {
    std::vector<int32_t> ranks(set.ranks().begin(), set.ranks().end());
    std::sort(ranks.begin(), ranks.end());
    static_sets.push_back(std::move(ranks));
  }
  absl::Status status = CheckRequest(request, job_id);
  JobRun* run = Find(job_id);
  // On an MPI world of daemons, every job of that world forms across the
  // whole world: one at a time. Jobs that form their own worlds through a
  // rendezvous do not wait for them.
  JobRun* serving = nullptr;
  if (!parts_.world.single() && !request.has_rendezvous()) {
    for (const auto& other : runs_) {
      if (!other->done() && !ThroughRendezvous(other->job())) serving = other.get();
    }
  }
  if (status.ok() && run == nullptr && serving != nullptr && serving->job().id() != job_id &&
      serving->job().ended()) {
    run = serving;  // waits for it, as it would for its own job's last run
  }
  if (status.ok() && run != nullptr && run->job().ended()) {
    // The ended run goes as soon as its last member leaves, which may be
    // moments away: refusing would fail a rank that initialises again
    // sooner than the others shut down.
    log::Coord().info("job '{}': local rank {} ({}) waits for job '{}' to end", job_id,
                      request.local_rank(), call->peer().ToString(), run->job().id());
    run->job().waiting().push_back({std::move(call), deadline});
    return;
  }
  if (status.ok() && run == nullptr && serving != nullptr) {
    // (Elastic jobs read this text: a refusal naming their earlier
    // generation is retried.)
    status = absl::UnavailableError(absl::StrCat("collectived is serving job '",
                                                 serving->job().id(), "'; job '", job_id,
                                                 "' can register when it has ended"));
  }
  if (status.ok() && run != nullptr) status = CheckAgainstRun(*run, request, static_sets);
  if (status.ok()) status = CheckBudgets(request, job_id, run == nullptr);
  if (!status.ok()) {
    log::Rpc().warn("registration from {} refused: {}", call->peer().ToString(), status.message());
    call->Finish(status, {});
    return;
  }
  auto client = NewClient(*call);
  if (!client.ok()) {
    log::Shm().error("registration from {}: {}", call->peer().ToString(),
                     client.status().message());
    call->Finish(client.status(), {});
    return;
  }
  if (run == nullptr) {
    runs_.push_back(std::make_unique<JobRun>(
        parts_,
        std::make_unique<job::Job>(job_id, request.local_size(), next_job_sequence_++, deadline)));
    run = runs_.back().get();
    log::Coord().info("job '{}' forming: {} local ranks expected", job_id, request.local_size());
  }
  registrations_[call->id()] = (*client)->id;
  log::Coord().info("job '{}': local rank {} registered ({}, client {})", job_id,
                    request.local_rank(), call->peer().ToString(), (*client)->id);
  (*client)->registration = std::move(call);
  (*client)->static_process_sets = std::move(static_sets);
  if (request.has_rendezvous()) {
    (*client)->rendezvous = request.rendezvous().address();
    (*client)->rendezvous_node = request.rendezvous().node();
    (*client)->rendezvous_nodes = request.rendezvous().nodes();
  }
  run->job().AddMember(std::move(*client));
  run->PublishTimelineState();
  if (run->job().complete()) Form(*run);
}

void Registrar::Form(JobRun& run) {
  const job::ClientRecord& first = *run.job().member(0);
  const bool rendezvous = !first.rendezvous.empty();
  if (rendezvous && first.rendezvous_nodes > 1) {
    FormThroughRendezvous(run, first);
    return;
  }
  if (!rendezvous && !parts_.world.broken().ok()) {
    Abort(run, parts_.world.broken());
    return;
  }
  if (rendezvous || parts_.world.single()) {
    if (absl::Status formed =
            run.Form(job::NodeLayout::Single(run.job().local_size()), /*world=*/nullptr);
        !formed.ok()) {
      Abort(run, formed);
    }
    return;
  }
  if (absl::Status started = parts_.world.StartExchange(run.job()); !started.ok()) {
    Abort(run, started);
    return;
  }
  exchanging_ = &run;
}

void Registrar::FormThroughRendezvous(JobRun& run, const job::ClientRecord& first) {
  const job::Job& job = run.job();
  const config::DaemonConfig& config = parts_.config;
  // Every node counts the job's formations alike (a job that shuts down and
  // initialises again forms again on every node).
  const uint64_t generation = world_generations_[job.id()]++;
  forming_worlds_.insert(job.sequence());
  log::Coord().info(
      "job '{}': all {} local ranks registered; forming its world as node {} of {} through "
      "the rendezvous at {}",
      job.id(), job.local_size(), first.rendezvous_node, first.rendezvous_nodes, first.rendezvous);
  formations_.Start({.job_sequence = job.sequence(),
                     .rendezvous = first.rendezvous,
                     .world = {.job_id = job.id(),
                               .generation = generation,
                               .node = first.rendezvous_node,
                               .nodes = first.rendezvous_nodes,
                               // Stand-in nodes of one machine tell apart by their addresses.
                               .host = config.node_address,
                               .bind_address = config.node_address,
                               .local_size = job.local_size(),
                               .settings = absl::StrCat(
                                   "fusion_threshold_bytes=", config.fusion_threshold_bytes,
                                   " cross_node_chunk_bytes=", config.cross_node_chunk_bytes,
                                   " response_cache_capacity=", config.response_cache_capacity,
                                   " autotune=", config.autotune ? "on" : "off"),
                               .deadline = job.formation_deadline(),
                               .operation_timeout = std::chrono::ceil<std::chrono::milliseconds>(
                                   std::chrono::duration<double>(config.node_timeout_seconds))}});
}

bool Registrar::TakeFormedWorlds() {
  std::vector<GlooFormations::Done> done = formations_.Take();
  for (GlooFormations::Done& formed : done) {
    forming_worlds_.erase(formed.job_sequence);
    JobRun* run = nullptr;
    for (const auto& candidate : runs_) {
      if (candidate->job().sequence() == formed.job_sequence) run = candidate.get();
    }
    // A run that went meanwhile leaves its world to close: the other nodes
    // see this one leave.
    if (run == nullptr || run->job().state() != job::JobState::kForming) continue;
    if (!formed.formed.ok()) {
      Abort(*run, formed.formed.status());
      continue;
    }
    const job::NodeLayout layout = formed.formed->world->layout();
    auto world = std::make_unique<GlooJobWorld>(
        parts_.config, std::move(*formed.formed), [this] { return parts_.world.stopping(); },
        parts_.wake);
    if (absl::Status status = run->Form(layout, std::move(world)); !status.ok()) {
      Abort(*run, status);
    }
  }
  return !done.empty();
}

void Registrar::Exchanged(absl::StatusOr<job::NodeLayout> layout) {
  JobRun* run = exchanging_;
  exchanging_ = nullptr;
  if (run == nullptr || run->job().state() != job::JobState::kForming) {
    // The job went away while the others formed it: they must hear it.
    parts_.world.Break(
        absl::UnavailableError("a job formed across nodes without this node's ranks"),
        /*abandon_mpi=*/false);
    return;
  }
  if (!layout.ok()) {
    Abort(*run, layout.status());
    return;
  }
  std::unique_ptr<JobWorld> world;
  if (layout->nodes() > 1) world = std::make_unique<MpiJobWorld>(parts_.world);
  if (absl::Status formed = run->Form(*layout, std::move(world)); !formed.ok()) {
    Abort(*run, formed);
  }
}

void Registrar::Abort(JobRun& run, const absl::Status& status) {
  observe::ReportJobNotFormed(run.job(), status, parts_.metrics);
  for (const auto& member : run.job().members()) {
    if (member && member->registration) {
      registrations_.erase(member->registration->id());
      member->registration->Finish(status, {});
    }
  }
  Remove(run);
}

void Registrar::Cancelled(uint64_t call_id) {
  for (const auto& run : runs_) {
    std::vector<job::Job::WaitingRegistration>& waiting = run->job().waiting();
    auto gave_up = std::find_if(waiting.begin(), waiting.end(), [&](const auto& registration) {
      return registration.call->id() == call_id;
    });
    if (gave_up != waiting.end()) {
      gave_up->call->Finish(absl::CancelledError("registration cancelled by the client"), {});
      waiting.erase(gave_up);
      return;
    }
  }
  auto it = registrations_.find(call_id);
  if (it == registrations_.end()) return;
  const uint64_t client_id = it->second;
  registrations_.erase(it);
  for (const auto& held : runs_) {
    JobRun& run = *held;
    job::ClientRecord* client = run.job().FindClient(client_id);
    if (client == nullptr) continue;
    if (run.job().state() != job::JobState::kForming) {
      run.RegistrationCancelled(*client);
      return;
    }
    log::Coord().info("job '{}': local rank {} ({}) gave up registering", run.job().id(),
                      client->local_rank, client->peer.ToString());
    client->registration->Finish(absl::CancelledError("registration cancelled by the client"), {});
    run.job().RemoveMember(client->local_rank);  // unlinks its segment
    if (run.job().empty() && exchanging_ != &run) {
      log::Coord().info("job '{}' has no registered ranks left", run.job().id());
      Remove(run);
    }
    return;
  }
}

void Registrar::Attached(uint64_t client_id) {
  absl::erase_if(registrations_, [&](const auto& entry) { return entry.second == client_id; });
}

void Registrar::RunTimers(Clock::time_point now) {
  for (size_t i = 0; i < runs_.size(); ++i) {
    JobRun& run = *runs_[i];
    job::Job& job = run.job();
    std::vector<job::Job::WaitingRegistration>& waiting = job.waiting();
    for (auto it = waiting.begin(); it != waiting.end();) {
      if (now < it->deadline) {
        ++it;
        continue;
      }
      const std::string job_id = JobIdOf(it->call->request());
      const std::string ended = job_id == job.id()
                                    ? std::string("its previous run has ended")
                                    : absl::StrCat("collectived's job '", job.id(), "' has ended");
      const std::string still_in = DescribeStillIn(job);
      const absl::Status late = absl::DeadlineExceededError(absl::StrCat(
          "job '", job_id, "' did not form within ", parts_.config.register_timeout_seconds,
          " s: ", ended,
          still_in.empty() ? ", but its transfers with the other nodes have not finished"
                           : absl::StrCat(", but ", still_in, " not left it"),
          job_id == job.id() ? " (each rank must shut down first)" : ""));
      log::Coord().warn("{}", late.message());
      it->call->Finish(late, {});
      it = waiting.erase(it);
    }
    // A world forming through a rendezvous fails by the deadline itself,
    // naming the nodes that did not come.
    if (job.state() != job::JobState::kForming || now < job.formation_deadline() ||
        forming_worlds_.contains(job.sequence())) {
      continue;
    }
    const std::vector<int32_t> missing = job.MissingLocalRanks();
    const absl::Status late = absl::DeadlineExceededError(
        missing.empty()
            ? absl::StrCat("job '", job.id(), "' did not form within ",
                           parts_.config.register_timeout_seconds, " s: all ", job.local_size(),
                           " local ranks of node ", parts_.world.world().rank(),
                           " registered, but not every other node's ranks did")
            : absl::StrCat("job '", job.id(), "' did not form within ",
                           parts_.config.register_timeout_seconds,
                           " s: ", job::DescribeLocalRanks(missing), " of ", job.local_size(),
                           " never registered"));
    if (exchanging_ == &run) parts_.world.AbandonExchange(late);
    Abort(run, late);
    --i;
  }
}

void Registrar::Shutdown(const absl::Status& status) {
  for (const auto& run : runs_) {
    for (const job::Job::WaitingRegistration& waiting : run->job().waiting()) {
      waiting.call->Finish(status, {});
    }
    run->job().waiting().clear();
  }
  std::vector<JobRun*> forming;
  for (const auto& run : runs_) {
    if (run->job().state() == job::JobState::kForming) forming.push_back(run.get());
  }
  for (JobRun* run : forming) Abort(*run, status);
}

}  // namespace collective::daemon::engine
