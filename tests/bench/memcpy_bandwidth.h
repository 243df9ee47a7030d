// The machine's memory bandwidth as a large memcpy sees it: the yardstick for
// the memory-traffic floor of a node-local allreduce, measured in the same run
// so that the floor reflects the machine as it is now.
#pragma once

#include <cstdint>

namespace collective::bench {

struct MemcpyBandwidth {
  uint64_t bytes = 0;
  int threads = 0;  // of the fastest copy
  // Bytes copied per second (the usual "memcpy GB/s"); the memory traffic is
  // twice that, one read and one write of every byte.
  double copy_bytes_per_second = 0;

  double traffic_bytes_per_second() const { return 2 * copy_bytes_per_second; }
};

// Copies `bytes` a few times with one thread and with `threads` threads, each
// its own slice; the fastest copy counts (the least disturbed by the rest of
// the machine).
MemcpyBandwidth MeasureMemcpy(uint64_t bytes, int threads);

}  // namespace collective::bench
