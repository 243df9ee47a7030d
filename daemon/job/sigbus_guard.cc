#include "daemon/job/sigbus_guard.h"

#include <array>
#include <atomic>
#include <mutex>

#include <signal.h>
#include <sys/mman.h>

namespace collective::daemon::job {
namespace {

constexpr int kSlots = 4096;

struct Slot {
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<bool> faulted{false};
};

// Process-wide by necessity: the signal handler has no other way in.
std::array<Slot, kSlots> g_slots;

void HandleSigbus(int signal, siginfo_t* info, void*) {
  const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Slot& slot : g_slots) {
    const uintptr_t begin = slot.begin.load(std::memory_order_acquire);
    const uintptr_t end = slot.end.load(std::memory_order_acquire);
    if (begin == 0 || address < begin || address >= end) continue;
    // mmap is a plain system call on Linux and safe to issue here.
    void* replaced = ::mmap(reinterpret_cast<void*>(begin), end - begin, PROT_READ | PROT_WRITE,
                            MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (replaced != MAP_FAILED) {
      slot.faulted.store(true, std::memory_order_release);
      return;  // the faulting instruction re-runs on the zero pages
    }
    break;
  }
  // Not ours: restore the default action; returning re-raises the fault.
  ::signal(signal, SIG_DFL);
}

}  // namespace

void SigbusGuard::Install() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = HandleSigbus;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, nullptr);
  });
}

int SigbusGuard::Register(void* base, size_t bytes) {
  static std::mutex mutex;  // registrations are serialised; the handler only reads
  std::lock_guard lock(mutex);
  for (int i = 0; i < kSlots; ++i) {
    Slot& slot = g_slots[i];
    if (slot.begin.load(std::memory_order_relaxed) != 0) continue;
    // `end` first: the handler treats the slot as live once `begin` is set.
    slot.end.store(reinterpret_cast<uintptr_t>(base) + bytes, std::memory_order_relaxed);
    slot.faulted.store(false, std::memory_order_relaxed);
    slot.begin.store(reinterpret_cast<uintptr_t>(base), std::memory_order_release);
    return i;
  }
  return -1;
}

void SigbusGuard::Unregister(int slot) { g_slots[slot].begin.store(0, std::memory_order_release); }

bool SigbusGuard::Faulted(int slot) {
  return g_slots[slot].faulted.load(std::memory_order_acquire);
}

}  // namespace collective::daemon::job
