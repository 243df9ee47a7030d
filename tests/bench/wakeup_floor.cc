#include "tests/bench/wakeup_floor.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace collective::bench {
namespace {

// The words the processes share (one anonymous shared mapping, before fork).
struct Shared {
  std::atomic<uint32_t> arrived{0};     // clients at the step; the parent sleeps on it
  std::atomic<uint32_t> generation{0};  // steps released; the clients sleep on it
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);

void FutexWait(std::atomic<uint32_t>& word, uint32_t expected) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, expected, nullptr, nullptr,
            0);
}

void FutexWake(std::atomic<uint32_t>& word, int count) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, count, nullptr, nullptr, 0);
}

[[noreturn]] void Client(Shared& shared, int clients, int steps, Arrival arrival) {
  for (uint32_t step = 0; step < static_cast<uint32_t>(steps); ++step) {
    const bool last = shared.arrived.fetch_add(1) + 1 == static_cast<uint32_t>(clients);
    if (last || arrival == Arrival::kEachWakes) FutexWake(shared.arrived, 1);
    while (shared.generation.load() == step) FutexWait(shared.generation, step);
  }
  ::_exit(0);
}

}  // namespace

absl::StatusOr<Summary> MeasureWakeupFloor(int clients, int iterations, Arrival arrival) {
  void* mapping =
      ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) {
    return absl::InternalError(absl::StrCat("mmap: ", std::strerror(errno)));
  }
  Shared& shared = *new (mapping) Shared;
  constexpr int kWarmup = 20;
  const int steps = kWarmup + iterations;
  std::vector<pid_t> children;
  for (int c = 0; c < clients; ++c) {
    const pid_t pid = ::fork();
    if (pid == 0) Client(shared, clients, steps, arrival);
    if (pid < 0) {
      const int error = errno;
      for (pid_t child : children) ::kill(child, SIGKILL);
      for (pid_t child : children) ::waitpid(child, nullptr, 0);
      ::munmap(mapping, sizeof(Shared));
      return absl::InternalError(absl::StrCat("fork: ", std::strerror(error)));
    }
    children.push_back(pid);
  }
  std::vector<int64_t> nanos;
  nanos.reserve(static_cast<size_t>(iterations));
  auto started = std::chrono::steady_clock::now();
  for (int step = 0; step < steps; ++step) {
    for (uint32_t seen = shared.arrived.load(); seen < static_cast<uint32_t>(clients);
         seen = shared.arrived.load()) {
      FutexWait(shared.arrived, seen);
    }
    shared.arrived.store(0);
    shared.generation.fetch_add(1);
    FutexWake(shared.generation, INT_MAX);
    // A step ends when the parent has released it; the next begins at once,
    // so each interval holds one release, the clients' wake-ups and their
    // next arrival.
    const auto now = std::chrono::steady_clock::now();
    if (step >= kWarmup) {
      nanos.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(now - started).count());
    }
    started = now;
  }
  bool clean = true;
  for (pid_t child : children) {
    int status = 0;
    clean = ::waitpid(child, &status, 0) == child && WIFEXITED(status) &&
            WEXITSTATUS(status) == 0 && clean;
  }
  ::munmap(mapping, sizeof(Shared));
  if (!clean) return absl::InternalError("a wake-up floor process did not exit cleanly");
  return Summarize(std::move(nanos));
}

}  // namespace collective::bench
