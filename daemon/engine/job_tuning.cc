#include "daemon/engine/job_tuning.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

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

JobTuning::JobTuning(const config::DaemonConfig& config)
    : config_(config),
      knobs_{.fusion_threshold_bytes = config.fusion_threshold_bytes,
             .cycle_time_ms = config.cycle_time_ms,
             .cross_node_chunk_bytes = config.cross_node_chunk_bytes} {}

void JobTuning::Start(const AcrossNodes& across) {
  if (!config_.autotune) return;
  const bool spans_nodes = across.view().active();
  tuning_.set_tuning(true);  // until node 0 says otherwise
  tuning_.set_max_trials(static_cast<int32_t>(config_.autotune_bayes_opt_max_samples));
  if (spans_nodes && !across.view().coordinator()) return;
  tune::ParameterManager::Options options{
      .warmup_samples = static_cast<int>(config_.autotune_warmup_samples),
      .steps_per_sample = static_cast<int>(config_.autotune_steps_per_sample),
      .max_samples = static_cast<int>(config_.autotune_bayes_opt_max_samples),
      .across_nodes = spans_nodes,
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

void JobTuning::Measure(const exec::FusedBatch& batch, uint64_t bytes, AcrossNodes& across) {
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
  if (across.view().active()) {
    across.Tune(std::move(tuning));
    return;
  }
  OnTuned(tuning);
}

void JobTuning::OnTuned(const v1::Tuning& tuning) {
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

void JobTuning::Describe(v1::AutotuneStatus* out) const {
  out->set_enabled(config_.autotune);
  // Its trials, or the values it fixed.
  out->set_tuning(config_.autotune && tuning_.tuning());
  out->set_trial(tuning_.trial());
  out->set_max_trials(static_cast<int32_t>(config_.autotune_bayes_opt_max_samples));
  out->set_fusion_threshold_bytes(knobs_.fusion_threshold_bytes);
  out->set_cycle_time_ms(knobs_.cycle_time_ms);
  out->set_cross_node_chunk_bytes(knobs_.cross_node_chunk_bytes);
  out->set_response_cache(config_.response_cache_capacity > 0);
  if (tuner_ != nullptr) out->set_best_bytes_per_second(tuner_->best_score());
}

}  // namespace collective::daemon::engine
