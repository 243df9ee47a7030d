// What status and metrics show of one job run (JobRun::Describe and
// JobRun::AddGauges); the daemon-wide parts are the Engine's.
#include <set>

#include "daemon/engine/job_run.h"

namespace collective::daemon::engine {
namespace {

v1::JobState ToProto(job::JobState state) {
  switch (state) {
    case job::JobState::kForming:
      return v1::JOB_STATE_FORMING;
    case job::JobState::kRunning:
      return v1::JOB_STATE_RUNNING;
    case job::JobState::kEnding:
      return v1::JOB_STATE_ENDING;
    case job::JobState::kFailed:
      return v1::JOB_STATE_FAILED;
  }
  return v1::JOB_STATE_UNSPECIFIED;
}

}  // namespace

void JobRun::Describe(Clock::time_point now, v1::JobReport& report) const {
  v1::JobStatus* status = report.mutable_job();
  status->set_id(job_->id());
  status->set_state(ToProto(job_->state()));
  status->set_local_size(job_->local_size());
  for (int32_t rank : job_->MissingLocalRanks()) status->add_missing_local_ranks(rank);
  status->set_registered(job_->local_size() - status->missing_local_ranks_size());
  status->set_failure(std::string(job_->failure().message()));
  if (job_->state() != job::JobState::kForming) {
    status->set_formed_unix_ms(absl::ToUnixMillis(job_->formed_at()));
  }
  std::set<uint32_t> owners;
  for (const auto& member : job_->members()) {
    if (!member) continue;
    owners.insert(member->peer.uid);
    v1::ClientStatus* client = report.add_clients();
    client->set_client_id(member->id);
    client->set_rank(job_->state() == job::JobState::kForming ? -1 : member->topology.rank());
    client->set_local_rank(member->local_rank);
    client->set_pid(member->peer.pid);
    client->set_uid(member->peer.uid);
    client->set_connected_unix_ms(absl::ToUnixMillis(member->registered_at));
    client->set_attached(member->attached() && member->live());
    client->set_arena_bytes(member->arena_bytes);
    client->set_bytes_submitted(member->bytes_submitted);
    client->set_requests_submitted(member->requests_submitted);
    client->set_outstanding_requests(static_cast<uint32_t>(member->outstanding.size()));
    client->set_result_bytes_held(member->result_bytes_held);
  }
  for (uint32_t uid : owners) status->add_owner_uids(uid);
  if (coordinator_ != nullptr) {
    const Clock::duration stall_after = stalls_.check_after();
    for (const negotiation::WaitingTensor& waiting : AllWaiting(/*with_announced=*/true)) {
      v1::PendingTensor* tensor = report.add_pending();
      tensor->set_name(waiting.name);
      tensor->set_process_set_id(waiting.process_set_id);
      tensor->set_collective(waiting.collective);
      tensor->set_age_seconds(std::chrono::duration<double>(now - waiting.first_at).count());
      tensor->set_stalled(stall_after > Clock::duration::zero() &&
                          now - waiting.first_at > stall_after);
      tensor->set_waiting_for_other_nodes(waiting.across_nodes);
      for (int32_t rank : waiting.ready_ranks) tensor->add_ready_ranks(rank);
      for (int32_t rank : waiting.missing_ranks) tensor->add_missing_ranks(rank);
    }
    v1::StatusResponse messages;
    p2p_->Describe(now, messages);
    report.mutable_pending_messages()->Swap(messages.mutable_pending_messages());
    for (int32_t rank : coordinator_->Joined(0)) report.add_joined_ranks(rank);
  }
  if (across_.view().active()) across_.view().Describe(report.mutable_negotiation());
  if (job_->state() != job::JobState::kForming) {
    for (const auto& [id, set] : job_->process_sets().sets()) {
      v1::ProcessSet* described = report.add_process_sets();
      described->set_id(id);
      for (int32_t rank : set.ranks) described->add_ranks(rank);
    }
  }
  if (job_->results() != nullptr) {
    report.set_result_arena_bytes(job_->results()->capacity());
    report.set_result_arena_used_bytes(job_->results()->bytes_in_use());
  }
  tuning_.Describe(report.mutable_autotune());
  v1::TimelineStatus* timeline = report.mutable_timeline();
  timeline->set_active(timeline_.active());
  timeline->set_path(timeline_.path());
  timeline->set_events_written(timeline_.events_written());
  *report.mutable_totals() = completion_.totals();
  across_.view().AddTo(*report.mutable_totals());
}

void JobRun::AddGauges(Clock::time_point now, observe::Metrics::Gauges& gauges) const {
  observe::Metrics::JobSeries& series = gauges.jobs.emplace_back();
  series.id = job_->id();
  series.state = std::string(job::JobStateName(job_->state()));
  if (job_->state() != job::JobState::kForming) {
    series.ranks = static_cast<uint64_t>(job_->layout().world_size());
  }
  series.local_ranks = static_cast<uint64_t>(job_->local_size());
  const v1::Totals& totals = completion_.totals();
  series.collectives = totals.collectives();
  series.requests = totals.requests();
  series.bytes_reduced = totals.bytes_reduced();
  series.errors = totals.errors();
  series.timeline_active = timeline_.active() ? 1 : 0;
  observe::Metrics::Load& load = series.load;
  for (const auto& member : job_->members()) {
    if (!member) continue;
    load.clients_connected += member->attached() && member->live() ? 1 : 0;
    load.outstanding_requests += member->outstanding.size();
  }
  if (job_->results() != nullptr) {
    load.result_arena_bytes = job_->results()->capacity();
    load.result_arena_used_bytes = job_->results()->bytes_in_use();
  }
  if (coordinator_ != nullptr) {
    const Clock::duration stall_after = stalls_.check_after();
    for (const negotiation::WaitingTensor& waiting : AllWaiting(/*with_announced=*/true)) {
      ++load.pending_tensors;
      load.stalled_tensors +=
          stall_after > Clock::duration::zero() && now - waiting.first_at > stall_after ? 1 : 0;
    }
  }
  gauges.load += load;
}

}  // namespace collective::daemon::engine
