// Engine: autotuning (daemon/tune). The tuner runs where the decisions are
// made — on one node the engine's own, across nodes node 0's — and measures
// the bytes every completed batch reduced. On one node its values are in
// force at once; across nodes they travel with node 0's next batch of
// decisions and every node (node 0 included) puts them in force when it
// carries that batch out, so every node fuses and chunks alike from the
// same step on. Only the fusion threshold, the cycle time and the chunk
// size are tuned: see README, Autotuning, for why not the response cache.
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "daemon/engine/engine.h"

namespace collective::daemon::engine {
namespace {

v1::Tuning ToProto(const tune::TunedValues& values, const tune::ParameterManager& tuner) {
  v1::Tuning tuning;
  tuning.set_fusion_threshold_bytes(values.fusion_threshold_bytes);
  tuning.set_cycle_time_ms(values.cycle_time_ms);
  tuning.set_cross_node_chunk_bytes(values.cross_node_chunk_bytes);
  tuning.set_tuning(tuner.tuning());
  tuning.set_trial(tuner.trial());
  tuning.set_max_trials(tuner.max_samples());
  return tuning;
}

}  // namespace

void Engine::StartTuning() {
  knobs_ = {.fusion_threshold_bytes = config_.fusion_threshold_bytes,
            .cycle_time_ms = config_.cycle_time_ms,
            .cross_node_chunk_bytes = config_.cross_node_chunk_bytes};
  tuner_.reset();
  tuning_.Clear();
  if (!config_.autotune) return;
  const bool across = across_.view().active();
  tuning_.set_tuning(true);  // until node 0 says otherwise
  tuning_.set_max_trials(static_cast<int32_t>(config_.autotune_bayes_opt_max_samples));
  if (across && !across_.view().coordinator()) return;
  tune::ParameterManager::Options options{
      .warmup_samples = static_cast<int>(config_.autotune_warmup_samples),
      .steps_per_sample = static_cast<int>(config_.autotune_steps_per_sample),
      .max_samples = static_cast<int>(config_.autotune_bayes_opt_max_samples),
      .across_nodes = across,
      .max_fusion_bytes = config_.result_arena_bytes,
      .seed = 1,
      .log_file = config_.autotune_log_file};
  auto tuner = tune::ParameterManager::Create(options, knobs_);
  if (!tuner.ok()) {
    // Tuning goes on without its log rather than fail the job.
    log::Coord().error("{} Autotuning goes on without it.", tuner.status().message());
    options.log_file.clear();
    tuner = tune::ParameterManager::Create(options, knobs_);
  }
  tuner_ = std::move(*tuner);
  tuning_ = ToProto(knobs_, *tuner_);
}

void Engine::MeasureForTuning(const exec::FusedBatch& batch, uint64_t bytes) {
  if (tuner_ == nullptr || !tuner_->tuning()) return;
  std::vector<std::string> tensors;
  tensors.reserve(batch.tensors.size());
  for (const negotiation::ReadyTensor& tensor : batch.tensors) {
    tensors.push_back(absl::StrCat(tensor.process_set_id, "/", tensor.name));
  }
  const int trial = tuner_->trial();
  const bool changed = tuner_->Update(tensors, bytes, Clock::now()).has_value();
  if (!changed && trial == tuner_->trial() && tuner_->tuning()) return;
  v1::Tuning tuning = ToProto(tuner_->values(), *tuner_);
  if (across_.view().active()) {
    across_.Tune(std::move(tuning));
    return;
  }
  OnTuned(tuning);
}

void Engine::OnTuned(const v1::Tuning& tuning) {
  const tune::TunedValues values{.fusion_threshold_bytes = tuning.fusion_threshold_bytes(),
                                 .cycle_time_ms = tuning.cycle_time_ms(),
                                 .cross_node_chunk_bytes = tuning.cross_node_chunk_bytes()};
  if (values != knobs_ || tuning.tuning() != tuning_.tuning()) {
    log::Coord().info(
        "autotune {} {}: fusion_threshold_bytes {}, cycle_time_ms {}, cross_node_chunk_bytes {}",
        tuning.tuning() ? "trial" : "fixed the best of",
        tuning.tuning() ? tuning.trial() : tuning.max_trials(), values.fusion_threshold_bytes,
        values.cycle_time_ms, values.cross_node_chunk_bytes);
  }
  knobs_ = values;
  tuning_ = tuning;
}

void Engine::DescribeTuning(v1::StatusResponse& response) const {
  v1::AutotuneStatus* out = response.mutable_autotune();
  out->set_enabled(config_.autotune);
  // The job running now, or the last one: its trials, or the values it fixed.
  out->set_tuning(config_.autotune && tuning_.tuning());
  out->set_trial(tuning_.trial());
  out->set_max_trials(static_cast<int32_t>(config_.autotune_bayes_opt_max_samples));
  out->set_fusion_threshold_bytes(knobs_.fusion_threshold_bytes);
  out->set_cycle_time_ms(knobs_.cycle_time_ms);
  out->set_cross_node_chunk_bytes(knobs_.cross_node_chunk_bytes);
  out->set_response_cache(config_.response_cache_capacity > 0);
  if (tuner_ != nullptr) out->set_best_bytes_per_second(tuner_->best_score());
}

void Engine::CrossNodeHost::Tuned(const v1::Tuning& tuning) { engine_.OnTuned(tuning); }

}  // namespace collective::daemon::engine
