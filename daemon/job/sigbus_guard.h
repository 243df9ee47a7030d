// Keeps a client from crashing the daemon by truncating its own segment.
//
// A client owns its segment's file and may ftruncate it; the daemon's next
// read of the vanished pages would raise SIGBUS. The guard's handler, when
// the faulting address lies in a registered client mapping, maps anonymous
// zero pages over that mapping and marks it faulted, so the interrupted read
// completes (with zeros) and the executor fails the operation with a clear
// error afterwards. Faults anywhere else keep the default action. (Wayland
// compositors protect themselves from client shm pools the same way.)
//
// A signal handler can only reach process-wide state, so the registry of
// guarded ranges is the one process-wide table in the daemon: a fixed array
// of lock-free slots.
#pragma once

#include <cstddef>
#include <cstdint>

namespace collective::daemon::job {

class SigbusGuard {
 public:
  // Installs the handler (once per process).
  static void Install();

  // Guards [base, base + bytes). Returns a slot index, or -1 if the table is
  // full (the range then stays unguarded; the caller logs it).
  static int Register(void* base, size_t bytes);
  static void Unregister(int slot);

  // Whether the range in `slot` was replaced after a fault.
  static bool Faulted(int slot);
};

// RAII registration of one range.
class GuardedRange {
 public:
  GuardedRange() = default;
  GuardedRange(void* base, size_t bytes) : slot_(SigbusGuard::Register(base, bytes)) {}
  ~GuardedRange() { Reset(); }
  GuardedRange(GuardedRange&& other) noexcept : slot_(other.slot_) { other.slot_ = -1; }
  GuardedRange& operator=(GuardedRange&& other) noexcept {
    if (this != &other) {
      Reset();
      slot_ = other.slot_;
      other.slot_ = -1;
    }
    return *this;
  }

  bool guarded() const { return slot_ >= 0; }
  bool faulted() const { return slot_ >= 0 && SigbusGuard::Faulted(slot_); }

 private:
  void Reset() {
    if (slot_ >= 0) SigbusGuard::Unregister(slot_);
    slot_ = -1;
  }
  int slot_ = -1;
};

}  // namespace collective::daemon::job
