// A job's autotuning (daemon/tune). The tuner runs where the decisions are
// made — on one node the job run's own, across nodes node 0's — and
// measures the bytes every completed batch reduced. On one node its values
// are in force at once; across nodes they travel with node 0's next batch
// of decisions and every node (node 0 included) puts them in force when it
// carries that batch out, so every node fuses and chunks alike from the same
// step on. Only the fusion threshold, the cycle time and the chunk size are
// tuned: see docs, Autotuning, for why not the response cache. One per job
// run, so that jobs tune apart; engine thread only.
#pragma once

#include <cstdint>
#include <memory>

#include "collective/v1/status.pb.h"
#include "config/daemon_config.h"
#include "daemon/engine/across_nodes.h"
#include "daemon/exec/fusion.h"
#include "daemon/tune/parameter_manager.h"
#include "daemon/tune/tuned_values.h"

namespace collective::daemon::engine {

class JobTuning {
 public:
  explicit JobTuning(const config::DaemonConfig& config);

  // The knobs in force (AcrossNodes reads them too).
  const tune::TunedValues& knobs() const { return knobs_; }

  // The job formed (`across`: its state across nodes): the tuner starts
  // measuring, on one node or on node 0.
  void Start(const AcrossNodes& across);
  // A batch completed, having reduced `bytes`: the tuner's measurement. Its
  // next values are in force at once on one node, and across nodes from
  // node 0's next batch of decisions.
  void Measure(const exec::FusedBatch& batch, uint64_t bytes, AcrossNodes& across);
  // Node 0's values, arrived with its decisions (on node 0 too).
  void OnTuned(const v1::Tuning& tuning);
  void Describe(v1::AutotuneStatus* out) const;

 private:
  const config::DaemonConfig& config_;
  tune::TunedValues knobs_;
  std::unique_ptr<tune::ParameterManager> tuner_;
  v1::Tuning tuning_;
};

}  // namespace collective::daemon::engine
