// One client's pool of interprocess CUDA event pairs, daemon side. The
// client records slot k's ready event once a request's input is produced;
// the daemon's streams wait on it, and the daemon records slot k's done
// event once the output is written; the client's stream waits on that
// before it reads the result. An event must never be recorded again before
// the other side has consumed the previous recording, so a slot belongs to
// one request at a time: the client reuses it only after it waited on its
// done event, and the daemon refuses a slot that a request still holds, or
// a sequence number that does not increase (a replayed or reordered
// request).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "daemon/gpu/device_backend.h"

namespace collective::daemon::gpu {

class EventPool {
 public:
  struct Slot {
    EventId ready = 0;
    EventId done = 0;
    uint64_t last_sequence = 0;  // of the last request that held it (0: none yet)
    bool held = false;
  };

  // Appends a slot (the client's pool grew).
  void Add(EventId ready, EventId done);
  size_t size() const { return slots_.size(); }

  // The request numbered `sequence` takes `slot`. INVALID_ARGUMENT, naming
  // why, when the slot does not exist, is held, or has seen this sequence
  // number or a later one.
  absl::Status Acquire(uint32_t slot, uint64_t sequence);
  // The request that held `slot` completed (its done event is recorded, or it
  // failed and never will be).
  void Release(uint32_t slot);

  const Slot& slot(uint32_t index) const { return slots_[index]; }
  size_t held() const;
  // Removes the slots from `size` on and returns their events, for closing
  // (TruncateTo(0): every event of the pool).
  std::vector<EventId> TruncateTo(size_t size);

 private:
  std::vector<Slot> slots_;
};

}  // namespace collective::daemon::gpu
