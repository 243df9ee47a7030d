#include "daemon/gloo/gloo_transfers.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>

#include <gloo/allgatherv.h>
#include <gloo/broadcast.h>
#include <gloo/types.h>

#include "common/dtype.h"
#include "daemon/exec/reduce_kernels.h"

namespace collective::daemon::gloo {
namespace {

using ::gloo::transport::UnboundBuffer;

// Slot prefixes of the transfers built here, clear of Gloo's own (0x01 to
// 0x08) and of the probe in gloo_failures.cc (0x4f). A slot is the prefix,
// then the transfer's tag.
constexpr uint8_t kReduceScatterSlot = 0x40;
constexpr uint8_t kAllgatherSlot = 0x41;
constexpr uint8_t kGatherSlot = 0x42;
constexpr uint8_t kExchangeSlot = 0x43;
constexpr uint8_t kMessageSlot = 0x44;
constexpr uint8_t kReduceSlot = 0x45;
constexpr uint8_t kAllreduceSlot = 0x46;  // its reduce-scatter
constexpr uint8_t kAllreduceGatherSlot = 0x47;

// The piece of a block a reduction takes from each node at a time (two in
// flight per node): bounds its scratch memory to 2 (nodes - 1) pieces. A
// multiple of every element size.
constexpr uint64_t kSegmentBytes = uint64_t{1} << 20;

uint64_t SlotOf(uint8_t prefix, uint32_t tag) { return ::gloo::Slot::build(prefix, tag); }

// A buffer registered with the context's waits while it lives: declared
// after what owns the buffer, so that it leaves the registry first.
class Registration {
 public:
  Registration(BufferWaits* waits, UnboundBuffer* buffer) : waits_(waits), buffer_(buffer) {
    if (waits_ != nullptr) waits_->Add(buffer_);
  }
  ~Registration() {
    if (waits_ != nullptr) waits_->Remove(buffer_);
  }
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;

 private:
  BufferWaits* const waits_;
  UnboundBuffer* const buffer_;
};

struct Buffer {
  std::unique_ptr<UnboundBuffer> gloo;
  std::unique_ptr<Registration> registration;  // after `gloo`: destroyed first

  UnboundBuffer* operator->() const { return gloo.get(); }
  explicit operator bool() const { return gloo != nullptr; }
};

// Gloo's buffers take a mutable pointer; those made for sending are only
// read.
Buffer Wrap(const GlooCall& call, const void* data, uint64_t bytes) {
  Buffer made{.gloo = call.context->createUnboundBuffer(const_cast<void*>(data), bytes)};
  made.registration = std::make_unique<Registration>(call.waits, made.gloo.get());
  return made;
}

void WaitSend(const Buffer& buffer, const GlooCall& call) {
  if (!buffer->waitSend(nullptr, call.timeout)) {
    throw std::runtime_error("a send was abandoned: the context broke");
  }
}

void WaitReceive(const Buffer& buffer, const GlooCall& call) {
  if (!buffer->waitRecv(nullptr, call.timeout)) {
    throw std::runtime_error("a receive was abandoned: the context broke");
  }
}

std::vector<int> Everyone(const ::gloo::Context& context) {
  std::vector<int> ranks;
  for (int rank = 0; rank < context.size; ++rank) {
    if (rank != context.rank) ranks.push_back(rank);
  }
  return ranks;
}

// This node's block of rows to each of `send_to`, and the blocks of each of
// `receive_from` into place; then waits for all of it.
void MoveBlocks(const GlooCall& call, uint64_t slot, void* data, uint64_t row_bytes,
                const std::vector<uint64_t>& rows, const std::vector<uint64_t>& displs,
                const std::vector<int>& send_to, const std::vector<int>& receive_from) {
  auto* base = static_cast<std::byte*>(data);
  const auto me = static_cast<size_t>(call.context->rank);
  Buffer mine;
  size_t sends = 0;
  if (rows[me] > 0 && !send_to.empty()) {
    mine = Wrap(call, base + displs[me] * row_bytes, rows[me] * row_bytes);
    for (int peer : send_to) {
      mine->send(peer, slot);
      ++sends;
    }
  }
  std::vector<Buffer> theirs;
  for (int peer : receive_from) {
    const auto place = static_cast<size_t>(peer);
    if (rows[place] == 0) continue;
    theirs.push_back(Wrap(call, base + displs[place] * row_bytes, rows[place] * row_bytes));
    theirs.back()->recv(peer, slot);
  }
  for (const Buffer& buffer : theirs) WaitReceive(buffer, call);
  for (size_t done = 0; done < sends; ++done) WaitSend(mine, call);
}

// Receives `bytes` from every other node in pieces of kSegmentBytes, two
// pieces in flight per node, and for each piece in order folds the nodes'
// pieces in rank order (this node's from `mine`) into `out` + the piece's
// offset. Every other node sends its `bytes` with SendPieces on `slot`.
void FoldPieces(const GlooCall& call, uint64_t slot, const std::byte* mine, uint64_t bytes,
                const exec::ReduceSpec& spec, std::byte* out) {
  const auto size = static_cast<size_t>(call.context->size);
  const auto me = static_cast<size_t>(call.context->rank);
  const size_t element = ElementSize(spec.dtype);
  const uint64_t pieces = (bytes + kSegmentBytes - 1) / kSegmentBytes;
  auto length = [&](uint64_t piece) {
    return std::min(kSegmentBytes, bytes - piece * kSegmentBytes);
  };
  // Per node, two halves: piece k lands in half k % 2.
  const uint64_t half = std::min(kSegmentBytes, bytes);
  std::vector<std::vector<std::byte>> scratch(size);
  std::vector<Buffer> incoming(size);
  for (size_t peer = 0; peer < size; ++peer) {
    if (peer == me || bytes == 0) continue;
    scratch[peer].resize(2 * half);
    incoming[peer] = Wrap(call, scratch[peer].data(), scratch[peer].size());
  }
  auto post = [&](uint64_t piece) {
    for (size_t peer = 0; peer < size; ++peer) {
      if (peer != me) {
        incoming[peer]->recv(static_cast<int>(peer), slot, (piece % 2) * half, length(piece));
      }
    }
  };
  for (uint64_t piece = 0; piece < std::min<uint64_t>(pieces, 2); ++piece) post(piece);
  std::vector<const void*> inputs(size);
  for (uint64_t piece = 0; piece < pieces; ++piece) {
    const uint64_t at = piece * kSegmentBytes;
    // A buffer counts its completed receives: one wait per node for the
    // oldest piece (Gloo completes one connection's receives in order).
    for (size_t peer = 0; peer < size; ++peer) {
      if (peer != me) WaitReceive(incoming[peer], call);
      inputs[peer] = peer == me ? mine + at : scratch[peer].data() + (piece % 2) * half;
    }
    exec::Reduce(spec, inputs, out + at, length(piece) / element);
    if (piece + 2 < pieces) post(piece + 2);
  }
}

// Posts the sends of `bytes` at `data` (within `source`) to `peer` on
// `slot`, in the pieces FoldPieces expects, counting them in `sends`: the
// caller waits for that many.
void SendPieces(uint64_t slot, int peer, const std::byte* data, uint64_t bytes, Buffer& source,
                size_t& sends) {
  for (uint64_t at = 0; at < bytes; at += kSegmentBytes) {
    source->send(peer, slot,
                 static_cast<size_t>(data - static_cast<const std::byte*>(source->ptr)) + at,
                 std::min(kSegmentBytes, bytes - at));
    ++sends;
  }
}

// The reduction of block i (`counts[i]` elements, blocks back to back) to
// node i: every node sends each other node its block and folds its own
// from every node's, then writes it at `into` (once its sends are done: it
// may lie where they read).
void ReduceBlocks(const GlooCall& call, uint64_t slot, void* data,
                  const std::vector<uint64_t>& counts, const exec::ReduceSpec& spec,
                  std::byte* into) {
  const auto size = static_cast<size_t>(call.context->size);
  const auto me = static_cast<size_t>(call.context->rank);
  const size_t element = ElementSize(spec.dtype);
  auto* bytes = static_cast<std::byte*>(data);
  std::vector<uint64_t> offsets(size);
  uint64_t total = 0;
  for (size_t place = 0; place < size; ++place) {
    offsets[place] = total;
    total += counts[place] * element;
  }
  Buffer source;
  size_t sends = 0;
  if (total > 0 && size > 1) source = Wrap(call, data, total);
  for (size_t peer = 0; peer < size; ++peer) {
    if (peer == me) continue;
    SendPieces(slot, static_cast<int>(peer), bytes + offsets[peer], counts[peer] * element, source,
               sends);
  }
  const uint64_t mine = counts[me] * element;
  std::vector<std::byte> result(mine);
  FoldPieces(call, slot, bytes + offsets[me], mine, spec, result.data());
  for (size_t done = 0; done < sends; ++done) WaitSend(source, call);
  if (mine > 0) std::memcpy(into, result.data(), mine);
}

std::vector<uint64_t> Offsets(const std::vector<uint64_t>& counts) {
  std::vector<uint64_t> offsets(counts.size());
  std::exclusive_scan(counts.begin(), counts.end(), offsets.begin(), uint64_t{0});
  return offsets;
}

uint64_t BytesOf(const std::vector<exec::RowBlock>& blocks, uint64_t row_bytes) {
  uint64_t bytes = 0;
  for (const exec::RowBlock& block : blocks) bytes += block.rows * row_bytes;
  return bytes;
}

// The only block with rows, or null when there are several.
const std::byte* SoleBlock(const std::vector<exec::RowBlock>& blocks) {
  const std::byte* sole = nullptr;
  for (const exec::RowBlock& block : blocks) {
    if (block.rows == 0) continue;
    if (sole != nullptr) return nullptr;
    sole = block.address;
  }
  return sole;
}

std::vector<std::byte> Pack(const std::vector<exec::RowBlock>& blocks, uint64_t row_bytes) {
  std::vector<std::byte> packed(BytesOf(blocks, row_bytes));
  uint64_t at = 0;
  for (const exec::RowBlock& block : blocks) {
    if (block.rows == 0) continue;
    std::memcpy(packed.data() + at, block.address, block.rows * row_bytes);
    at += block.rows * row_bytes;
  }
  return packed;
}

// The blocks are where a node receives: the engine gives their addresses as
// RowBlock's const pointers.
void Unpack(const std::vector<std::byte>& packed, const std::vector<exec::RowBlock>& blocks,
            uint64_t row_bytes) {
  uint64_t at = 0;
  for (const exec::RowBlock& block : blocks) {
    const uint64_t bytes = std::min<uint64_t>(block.rows * row_bytes, packed.size() - at);
    if (bytes == 0) continue;
    std::memcpy(const_cast<std::byte*>(block.address), packed.data() + at, bytes);
    at += bytes;
  }
}

}  // namespace

void BufferWaits::Add(UnboundBuffer* buffer) {
  std::lock_guard<std::mutex> lock(mutex_);
  buffers_.push_back(buffer);
  if (aborted_) {
    buffer->abortWaitRecv();
    buffer->abortWaitSend();
  }
}

void BufferWaits::Remove(UnboundBuffer* buffer) {
  std::lock_guard<std::mutex> lock(mutex_);
  buffers_.erase(std::find(buffers_.begin(), buffers_.end(), buffer));
}

void BufferWaits::AbortAll() {
  std::lock_guard<std::mutex> lock(mutex_);
  aborted_ = true;
  for (UnboundBuffer* buffer : buffers_) {
    buffer->abortWaitRecv();
    buffer->abortWaitSend();
  }
}

void Allreduce(const GlooCall& call, void* data, uint64_t count, const exec::ReduceSpec& spec) {
  const auto size = static_cast<uint64_t>(call.context->size);
  if (count == 0 || size == 1) return;
  // A reduce-scatter of near-equal blocks, each reduced in place, then an
  // allgather of the blocks: every node sends 2 (n - 1) / n of the data, as
  // a ring would, and the result is the kernels' fold in rank order.
  std::vector<uint64_t> counts(size);
  for (uint64_t place = 0; place < size; ++place) {
    counts[place] = count / size + (place < count % size ? 1 : 0);
  }
  const std::vector<uint64_t> offsets = Offsets(counts);
  const size_t element = ElementSize(spec.dtype);
  auto* bytes = static_cast<std::byte*>(data);
  const auto me = static_cast<size_t>(call.context->rank);
  ReduceBlocks(call, SlotOf(kAllreduceSlot, call.tag), data, counts, spec,
               bytes + offsets[me] * element);
  const std::vector<int> others = Everyone(*call.context);
  MoveBlocks(call, SlotOf(kAllreduceGatherSlot, call.tag), data, element, counts, offsets, others,
             others);
}

void Reduce(const GlooCall& call, void* data, uint64_t count, const exec::ReduceSpec& spec,
            int root) {
  if (count == 0 || call.context->size == 1) return;
  const uint64_t bytes = count * ElementSize(spec.dtype);
  const uint64_t slot = SlotOf(kReduceSlot, call.tag);
  auto* base = static_cast<std::byte*>(data);
  if (call.context->rank != root) {
    // Each node's part crosses the network once, to the root.
    Buffer source = Wrap(call, data, bytes);
    size_t sends = 0;
    SendPieces(slot, root, base, bytes, source, sends);
    for (size_t done = 0; done < sends; ++done) WaitSend(source, call);
    return;
  }
  // The kernels write in place only over their first input: the root folds
  // into a copy.
  std::vector<std::byte> result(bytes);
  FoldPieces(call, slot, base, bytes, spec, result.data());
  std::memcpy(data, result.data(), bytes);
}

void ReduceScatter(const GlooCall& call, void* data, const std::vector<uint64_t>& counts,
                   const exec::ReduceSpec& spec) {
  ReduceBlocks(call, SlotOf(kReduceScatterSlot, call.tag), data, counts, spec,
               static_cast<std::byte*>(data));
}

void Allgather(const GlooCall& call, void* data, uint64_t row_bytes,
               const std::vector<uint64_t>& rows, const std::vector<uint64_t>& displs) {
  if (call.context->size == 1) return;
  bool back_to_back = true;
  uint64_t next = 0;
  for (size_t place = 0; place < rows.size(); ++place) {
    back_to_back = back_to_back && displs[place] == next;
    next += rows[place];
  }
  if (next == 0 || row_bytes == 0) return;
  if (back_to_back) {
    // Gloo's ring, which waits on this buffer only.
    std::vector<size_t> bytes;
    for (uint64_t count : rows) bytes.push_back(count * row_bytes);
    ::gloo::AllgathervOptions options(call.context);
    std::unique_ptr<UnboundBuffer> out = call.context->createUnboundBuffer(data, next * row_bytes);
    const Registration registered(call.waits, out.get());
    options.setOutput<uint8_t>(std::move(out), std::move(bytes));
    options.setTag(call.tag);
    options.setTimeout(call.timeout);
    ::gloo::allgatherv(options);
    return;
  }
  const std::vector<int> others = Everyone(*call.context);
  MoveBlocks(call, SlotOf(kAllgatherSlot, call.tag), data, row_bytes, rows, displs, others, others);
}

void Gather(const GlooCall& call, void* data, uint64_t row_bytes, const std::vector<uint64_t>& rows,
            const std::vector<uint64_t>& displs, int root) {
  if (call.context->size == 1 || row_bytes == 0) return;
  const uint64_t slot = SlotOf(kGatherSlot, call.tag);
  if (call.context->rank == root) {
    MoveBlocks(call, slot, data, row_bytes, rows, displs, {}, Everyone(*call.context));
  } else {
    MoveBlocks(call, slot, data, row_bytes, rows, displs, {root}, {});
  }
}

void Broadcast(const GlooCall& call, void* data, uint64_t bytes, int root) {
  if (bytes == 0 || call.context->size == 1) return;
  // Gloo's binomial tree, which waits on this buffer only.
  ::gloo::BroadcastOptions options(call.context);
  std::unique_ptr<UnboundBuffer> out = call.context->createUnboundBuffer(data, bytes);
  const Registration registered(call.waits, out.get());
  options.setOutput<uint8_t>(std::move(out));
  options.setRoot(root);
  options.setTag(call.tag);
  options.setTimeout(call.timeout);
  ::gloo::broadcast(options);
}

void Exchange(const GlooCall& call, uint64_t row_bytes,
              const std::vector<std::vector<exec::RowBlock>>& send,
              const std::vector<std::vector<exec::RowBlock>>& receive) {
  const auto size = static_cast<size_t>(call.context->size);
  const auto me = static_cast<size_t>(call.context->rank);
  const uint64_t slot = SlotOf(kExchangeSlot, call.tag);
  // This node's own rows move in memory.
  if (BytesOf(send[me], row_bytes) > 0) Unpack(Pack(send[me], row_bytes), receive[me], row_bytes);
  // A peer's rows travel as one message: from (into) the block itself when
  // there is only one, else through a packed copy.
  std::vector<std::vector<std::byte>> packed(size);
  std::vector<std::vector<std::byte>> unpacked(size);
  std::vector<Buffer> outgoing(size);
  std::vector<Buffer> incoming(size);
  for (size_t peer = 0; peer < size; ++peer) {
    if (peer == me) continue;
    const int rank = static_cast<int>(peer);
    if (const uint64_t bytes = BytesOf(send[peer], row_bytes); bytes > 0) {
      const std::byte* from = SoleBlock(send[peer]);
      if (from == nullptr) {
        packed[peer] = Pack(send[peer], row_bytes);
        from = packed[peer].data();
      }
      outgoing[peer] = Wrap(call, from, bytes);
      outgoing[peer]->send(rank, slot);
    }
    if (const uint64_t bytes = BytesOf(receive[peer], row_bytes); bytes > 0) {
      const std::byte* into = SoleBlock(receive[peer]);
      if (into == nullptr) {
        unpacked[peer].resize(bytes);
        into = unpacked[peer].data();
      }
      incoming[peer] = Wrap(call, into, bytes);
      incoming[peer]->recv(rank, slot);
    }
  }
  for (size_t peer = 0; peer < size; ++peer) {
    if (!incoming[peer]) continue;
    WaitReceive(incoming[peer], call);
    if (!unpacked[peer].empty()) Unpack(unpacked[peer], receive[peer], row_bytes);
  }
  for (const Buffer& buffer : outgoing) {
    if (buffer) WaitSend(buffer, call);
  }
}

namespace {

// A message's pieces on one buffer, posted in order (Gloo matches the
// operations of one slot in the order posted), then waited for.
template <typename Post>
size_t PostPieces(uint64_t bytes, uint64_t chunk_bytes, Post post) {
  const uint64_t most = std::max<uint64_t>(chunk_bytes, 1);
  size_t pieces = 0;
  for (uint64_t at = 0; at < bytes; at += most) {
    post(at, std::min(most, bytes - at));
    ++pieces;
  }
  return pieces;
}

}  // namespace

void Send(const GlooCall& call, int peer, const void* data, uint64_t bytes, uint64_t chunk_bytes) {
  if (bytes == 0) return;  // both halves know the length: nothing to pair
  const uint64_t slot = SlotOf(kMessageSlot, call.tag);
  Buffer buffer = Wrap(call, data, bytes);
  const size_t pieces = PostPieces(bytes, chunk_bytes, [&](uint64_t at, uint64_t piece) {
    buffer->send(peer, slot, at, piece);
  });
  for (size_t done = 0; done < pieces; ++done) WaitSend(buffer, call);
}

void Receive(const GlooCall& call, int peer, void* data, uint64_t bytes, uint64_t chunk_bytes) {
  if (bytes == 0) return;
  const uint64_t slot = SlotOf(kMessageSlot, call.tag);
  Buffer buffer = Wrap(call, data, bytes);
  const size_t pieces = PostPieces(bytes, chunk_bytes, [&](uint64_t at, uint64_t piece) {
    buffer->recv(peer, slot, at, piece);
  });
  for (size_t done = 0; done < pieces; ++done) WaitReceive(buffer, call);
}

}  // namespace collective::daemon::gloo
