// How a job's work comes in: each attached client's submission ring, read in
// order — releases of results, CUDA registrations, and requests — and each
// request's admission: a request id not in use, a job that runs, the
// client's limit of outstanding requests, a request valid against the
// client's own segment (job/request_validator.h), its CUDA allocations,
// and a process set it belongs to. An admitted request goes to the job run
// (Intake::Run); a refused one completes with its error here. A client that
// breaks the ring's protocol is dropped. One per job run; engine thread
// only.
#pragma once

#include "absl/status/status.h"
#include "collective/v1/collective.pb.h"
#include "config/daemon_config.h"
#include "daemon/engine/completion.h"
#include "daemon/gpu/gpu_executor.h"
#include "daemon/job/client_record.h"
#include "daemon/job/job.h"
#include "daemon/job/process_sets.h"
#include "daemon/observe/timeline.h"

namespace collective::daemon::engine {

class Intake {
 public:
  // What the job run does with what comes in.
  class Run {
   public:
    virtual ~Run() = default;
    // An admitted request of `set`'s member `client`.
    virtual void Admitted(job::ClientRecord& client, v1::TensorRequest& request,
                          const job::ProcessSet& set) = 0;
    virtual void RegisterCuda(job::ClientRecord& client, const v1::RegisterCuda& message) = 0;
    // The client broke the protocol: it is gone, and so is its job.
    virtual void Drop(job::ClientRecord& client, const absl::Status& why) = 0;
  };

  Intake(const config::DaemonConfig& config, Completion& completion, gpu::GpuExecutor& gpu,
         observe::JobTimelines& timeline, Run& run)
      : config_(config), completion_(completion), gpu_(gpu), timeline_(timeline), run_(run) {}

  // Reads every attached client's ring; true if anything came.
  bool Drain(job::Job& job);
  // Reads one client's ring (also what a leaving client published last).
  bool Drain(job::Job& job, job::ClientRecord& client);

 private:
  void OnMessage(job::Job& job, job::ClientRecord& client, v1::ClientMessage& message);
  void Admit(job::Job& job, job::ClientRecord& client, v1::TensorRequest& request);
  void OnCopyOuts(job::ClientRecord& client, const v1::ClientMessage& message);

  const config::DaemonConfig& config_;
  Completion& completion_;
  gpu::GpuExecutor& gpu_;
  observe::JobTimelines& timeline_;
  Run& run_;
};

}  // namespace collective::daemon::engine
