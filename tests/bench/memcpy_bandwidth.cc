#include "tests/bench/memcpy_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

namespace collective::bench {
namespace {

constexpr int kRepetitions = 7;

// The fastest of a few copies of `bytes`, each thread copying its own slice.
double BestSeconds(const char* source, char* destination, uint64_t bytes, int threads) {
  const uint64_t slice = (bytes / static_cast<uint64_t>(threads) + 63) / 64 * 64;
  double best = 0;
  for (int repetition = 0; repetition < kRepetitions; ++repetition) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::jthread> workers;
    for (int t = 0; t < threads; ++t) {
      const uint64_t begin = std::min(bytes, slice * static_cast<uint64_t>(t));
      const uint64_t end = std::min(bytes, begin + slice);
      workers.emplace_back([=] { std::memcpy(destination + begin, source + begin, end - begin); });
    }
    workers.clear();  // joins
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (repetition == 0 || seconds < best) best = seconds;
  }
  return best;
}

}  // namespace

MemcpyBandwidth MeasureMemcpy(uint64_t bytes, int threads) {
  // Touched once before timing, so that page faults are not counted.
  auto source = std::make_unique_for_overwrite<char[]>(bytes);
  auto destination = std::make_unique_for_overwrite<char[]>(bytes);
  std::memset(source.get(), 1, bytes);
  std::memset(destination.get(), 0, bytes);
  MemcpyBandwidth best{.bytes = bytes};
  // One thread often copies as fast as several; the machine's bandwidth is
  // the better of the two.
  for (const int count : {1, std::max(threads, 1)}) {
    const double seconds = BestSeconds(source.get(), destination.get(), bytes, count);
    if (static_cast<double>(bytes) / seconds > best.copy_bytes_per_second) {
      best.threads = count;
      best.copy_bytes_per_second = static_cast<double>(bytes) / seconds;
    }
  }
  return best;
}

}  // namespace collective::bench
