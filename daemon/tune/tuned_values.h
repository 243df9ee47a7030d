// The knob values the autotuner moves and the engine reads: the ones in
// force, which start as the configuration's. Plain data; the engine thread
// owns the copy in force.
#pragma once

#include <cstdint>

namespace collective::daemon::tune {

struct TunedValues {
  uint64_t fusion_threshold_bytes = 0;
  uint32_t cycle_time_ms = 1;
  uint64_t cross_node_chunk_bytes = 0;

  friend bool operator==(const TunedValues&, const TunedValues&) = default;
};

}  // namespace collective::daemon::tune
