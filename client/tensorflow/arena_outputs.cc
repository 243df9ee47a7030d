#include "arena_outputs.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

#include "collective/collective.h"
#include "op_session.h"
#include "tensorflow/core/framework/allocator.h"

namespace collective::tensorflow {
namespace {

using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// How much of the arena an allocator may take: outputs leave at least half
// of the arena free (the rest is for the copies of inputs: a grouped op's
// outputs are allocated before its inputs are copied, and a step's outputs
// live on into the next); tensors moved there to stay take at most half of
// what is free.
enum class Share { kOutputs, kMoves };

bool Fits(Share share, uint64_t bytes, uint64_t free_bytes, uint64_t arena_bytes) {
  if (share == Share::kMoves) return bytes <= free_bytes / 2;
  return bytes <= free_bytes && free_bytes - bytes >= arena_bytes / 2;
}

// Lends arena blocks of the current session's client within its share;
// never destroyed (a tensor may be freed during the process's exit).
class ArenaAllocator final : public ::tensorflow::Allocator {
 public:
  static ArenaAllocator& Get(Share share) {
    static auto* outputs = new ArenaAllocator(Share::kOutputs);
    static auto* moves = new ArenaAllocator(Share::kMoves);
    return share == Share::kOutputs ? *outputs : *moves;
  }

  std::string Name() override { return "collective_arena"; }

  // Null when there is no session or no block is free now (TensorFlow's
  // Tensor constructor then leaves the tensor unallocated).
  void* AllocateRaw(size_t alignment, size_t num_bytes) override {
    if (alignment > 64) return nullptr;  // arena blocks are aligned to 64 bytes
    void* data = nullptr;
    collective_buffer_t* buffer = nullptr;
    OpSession::WithCurrent([&](OpSession& session) {
      collective_client_t* client = session.client();
      if (!Fits(share_, num_bytes, collective_arena_free_bytes(client),
                collective_arena_bytes(client))) {
        return;
      }
      if (collective_buffer_try_alloc(client, num_bytes, &buffer, &data) != 0) data = nullptr;
    });
    if (data == nullptr) return nullptr;
    std::lock_guard lock(mutex_);
    buffers_.emplace(data, buffer);
    return data;
  }

  void DeallocateRaw(void* ptr) override {
    collective_buffer_t* buffer = nullptr;
    {
      std::lock_guard lock(mutex_);
      auto it = buffers_.find(ptr);
      if (it == buffers_.end()) return;
      buffer = it->second;
      buffers_.erase(it);
    }
    collective_buffer_free(buffer);
  }

 private:
  explicit ArenaAllocator(Share share) : share_(share) {}

  const Share share_;
  std::mutex mutex_;
  std::unordered_map<void*, collective_buffer_t*> buffers_;  // guarded by mutex_
};

// COLLECTIVE_TF_ARENA_OUTPUTS=0 turns arena outputs off (read once): for a
// trainer that needs its whole arena for inputs, and to measure the copy path.
bool ArenaOutputsEnabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("COLLECTIVE_TF_ARENA_OUTPUTS");
    return value == nullptr || std::string(value) != "0";
  }();
  return enabled;
}

}  // namespace

absl::Status AllocateOutput(::tensorflow::OpKernelContext* context, int index,
                            const TensorShape& shape, Tensor** output) {
  const ::tensorflow::DataType dtype = context->expected_output_dtype(index);
  const size_t bytes =
      static_cast<size_t>(shape.num_elements()) * ::tensorflow::DataTypeSize(dtype);
  if (bytes >= kArenaOutputMinBytes && ArenaOutputsEnabled()) {
    Tensor in_arena(&ArenaAllocator::Get(Share::kOutputs), dtype, shape);
    if (in_arena.IsInitialized()) {
      context->set_output(index, in_arena);
      *output = context->mutable_output(index);
      return absl::OkStatus();
    }
  }
  return context->allocate_output(index, shape, output);
}

Tensor ArenaTensor(::tensorflow::DataType dtype, const TensorShape& shape) {
  return Tensor(&ArenaAllocator::Get(Share::kMoves), dtype, shape);
}

}  // namespace collective::tensorflow
