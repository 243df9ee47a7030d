// The phases a tensor passes through, by the names the timeline's trace
// gives them: the ops name their work's phase, the engine and the GPU path
// the others.
#pragma once

#include "absl/strings/string_view.h"

namespace collective::daemon::exec {

inline constexpr absl::string_view kPhaseQueue = "QUEUE";  // ready, waiting to run
// Inputs copied into the result.
inline constexpr absl::string_view kPhaseFusionCopy = "FUSION_COPY";
inline constexpr absl::string_view kPhaseReduce = "REDUCE";         // local reduction
inline constexpr absl::string_view kPhaseCrossNode = "CROSS_NODE";  // transfer among daemons
inline constexpr absl::string_view kPhaseGpu = "GPU";  // CUDA tensors: device kernels and NCCL
inline constexpr absl::string_view kPhaseCopyOut = "COPY_OUT";  // a rank reads its result

}  // namespace collective::daemon::exec
