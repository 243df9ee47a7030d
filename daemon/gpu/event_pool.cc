#include "daemon/gpu/event_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace collective::daemon::gpu {

void EventPool::Add(EventId ready, EventId done) {
  slots_.push_back(Slot{.ready = ready, .done = done});
}

absl::Status EventPool::Acquire(uint32_t index, uint64_t sequence) {
  if (index >= slots_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CUDA event slot ", index, " does not exist (the client registered ", slots_.size(), ")"));
  }
  Slot& slot = slots_[index];
  if (slot.held) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA event slot ", index, " is still held by request number ",
                     slot.last_sequence, ", which has not completed"));
  }
  if (sequence <= slot.last_sequence) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence number ", sequence, " of CUDA event slot ", index,
                     " does not follow the slot's last one, ", slot.last_sequence));
  }
  slot.held = true;
  slot.last_sequence = sequence;
  return absl::OkStatus();
}

void EventPool::Release(uint32_t index) {
  if (index < slots_.size()) slots_[index].held = false;
}

size_t EventPool::held() const {
  return static_cast<size_t>(
      std::count_if(slots_.begin(), slots_.end(), [](const Slot& slot) { return slot.held; }));
}

std::vector<EventId> EventPool::TruncateTo(size_t size) {
  std::vector<EventId> events;
  for (size_t i = size; i < slots_.size(); ++i) {
    events.push_back(slots_[i].ready);
    events.push_back(slots_[i].done);
  }
  if (size < slots_.size()) slots_.resize(size);
  return events;
}

}  // namespace collective::daemon::gpu
