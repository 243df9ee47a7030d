#include "daemon/gloo/gloo_transfers.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/reduce.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "common/dtype.h"

namespace collective::daemon::gloo {
namespace {

using Buffer = std::unique_ptr<::gloo::transport::UnboundBuffer>;

// Slot prefixes of the transfers built here, clear of Gloo's own (0x01 to
// 0x08) and of the probe in gloo_failures.cc (0x4f). A slot is the prefix,
// then the transfer's tag.
constexpr uint8_t kReduceScatterSlot = 0x40;
constexpr uint8_t kAllgatherSlot = 0x41;
constexpr uint8_t kGatherSlot = 0x42;
constexpr uint8_t kExchangeSlot = 0x43;
constexpr uint8_t kMessageSlot = 0x44;

// The piece of its block a reduce-scatter takes from each node at a time:
// bounds its scratch memory to (nodes - 1) pieces. A multiple of every
// element size.
constexpr uint64_t kSegmentBytes = uint64_t{1} << 20;

uint64_t SlotOf(uint8_t prefix, uint32_t tag) { return ::gloo::Slot::build(prefix, tag); }

// Gloo's buffers take a mutable pointer; those made for sending are only
// read.
Buffer Wrap(const GlooCall& call, const void* data, uint64_t bytes) {
  return call.context->createUnboundBuffer(const_cast<void*>(data), bytes);
}

void WaitSend(::gloo::transport::UnboundBuffer& buffer, const GlooCall& call) {
  if (!buffer.waitSend(nullptr, call.timeout)) throw std::runtime_error("a send was abandoned");
}

void WaitReceive(::gloo::transport::UnboundBuffer& buffer, const GlooCall& call) {
  if (!buffer.waitRecv(nullptr, call.timeout)) throw std::runtime_error("a receive was abandoned");
}

// Runs `run` with a value of the unsigned type of `element` bytes: Gloo's
// options learn the element size from their setters' type.
template <typename Run>
void WithElementType(size_t element, Run run) {
  switch (element) {
    case 1:
      run(uint8_t{});
      return;
    case 2:
      run(uint16_t{});
      return;
    case 4:
      run(uint32_t{});
      return;
    case 8:
      run(uint64_t{});
      return;
    default:
      throw std::invalid_argument("an element of " + std::to_string(element) + " bytes");
  }
}

std::vector<int> Everyone(const ::gloo::Context& context) {
  std::vector<int> ranks;
  for (int rank = 0; rank < context.size; ++rank) {
    if (rank != context.rank) ranks.push_back(rank);
  }
  return ranks;
}

// This node's block of rows to each of `peers`, and each of `peers`' blocks
// into place; then waits for all of it.
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
  for (Buffer& buffer : theirs) WaitReceive(*buffer, call);
  for (size_t done = 0; done < sends; ++done) WaitSend(*mine, call);
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

void Allreduce(const GlooCall& call, void* data, uint64_t count, size_t element,
               const ElementReduction& reduce) {
  if (count == 0 || call.context->size == 1) return;
  WithElementType(element, [&](auto type) {
    using T = decltype(type);
    ::gloo::AllreduceOptions options(call.context);
    options.setOutput(static_cast<T*>(data), count);
    options.setReduceFunction(reduce);
    options.setTag(call.tag);
    options.setTimeout(call.timeout);
    ::gloo::allreduce(options);
  });
}

void Reduce(const GlooCall& call, void* data, uint64_t count, size_t element,
            const ElementReduction& reduce, int root) {
  if (count == 0 || call.context->size == 1) return;
  // Gloo's ring writes partial results into every node's output: the
  // others reduce into scratch, so that their data stays as it was.
  std::vector<std::byte> scratch;
  WithElementType(element, [&](auto type) {
    using T = decltype(type);
    ::gloo::ReduceOptions options(call.context);
    if (call.context->rank == root) {
      options.setOutput(static_cast<T*>(data), count);
    } else {
      scratch.resize(count * element);
      options.setInput(static_cast<T*>(data), count);
      options.setOutput(reinterpret_cast<T*>(scratch.data()), count);
    }
    options.setRoot(root);
    options.setReduceFunction(reduce);
    options.setTag(call.tag);
    options.setTimeout(call.timeout);
    ::gloo::reduce(options);
  });
}

void ReduceScatter(const GlooCall& call, void* data, const std::vector<uint64_t>& counts,
                   const exec::ReduceSpec& spec) {
  const ::gloo::Context& context = *call.context;
  const auto size = static_cast<size_t>(context.size);
  const auto me = static_cast<size_t>(context.rank);
  const size_t element = ElementSize(spec.dtype);
  auto* bytes = static_cast<std::byte*>(data);
  std::vector<uint64_t> offsets(size);
  uint64_t total = 0;
  for (size_t place = 0; place < size; ++place) {
    offsets[place] = total;
    total += counts[place] * element;
  }
  const uint64_t slot = SlotOf(kReduceScatterSlot, call.tag);
  // Every other node's block goes to it straight from `data`, in pieces.
  Buffer source;
  size_t sends = 0;
  if (total > 0 && size > 1) source = Wrap(call, data, total);
  for (size_t peer = 0; peer < size; ++peer) {
    const uint64_t block = counts[peer] * element;
    if (peer == me) continue;
    for (uint64_t at = 0; at < block; at += kSegmentBytes) {
      source->send(static_cast<int>(peer), slot, offsets[peer] + at,
                   std::min(kSegmentBytes, block - at));
      ++sends;
    }
  }
  // This node's block from every node, piece by piece, folded in rank
  // order into `result`: `data` still feeds the sends above.
  const uint64_t mine = counts[me] * element;
  std::vector<std::byte> result(mine);
  std::vector<std::vector<std::byte>> scratch(size);
  std::vector<Buffer> incoming(size);
  for (size_t peer = 0; peer < size; ++peer) {
    if (peer == me || mine == 0) continue;
    scratch[peer].resize(std::min(kSegmentBytes, mine));
    incoming[peer] = Wrap(call, scratch[peer].data(), scratch[peer].size());
  }
  std::vector<const void*> inputs(size);
  for (uint64_t at = 0; at < mine; at += kSegmentBytes) {
    const uint64_t piece = std::min(kSegmentBytes, mine - at);
    for (size_t peer = 0; peer < size; ++peer) {
      if (peer != me) incoming[peer]->recv(static_cast<int>(peer), slot, 0, piece);
    }
    for (size_t peer = 0; peer < size; ++peer) {
      if (peer != me) WaitReceive(*incoming[peer], call);
      inputs[peer] = peer == me ? bytes + offsets[me] + at : scratch[peer].data();
    }
    exec::Reduce(spec, inputs, result.data() + at, piece / element);
  }
  for (size_t done = 0; done < sends; ++done) WaitSend(*source, call);
  if (mine > 0) std::memcpy(data, result.data(), mine);
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
    std::vector<size_t> bytes;
    for (uint64_t count : rows) bytes.push_back(count * row_bytes);
    ::gloo::AllgathervOptions options(call.context);
    options.setOutput(static_cast<uint8_t*>(data), std::move(bytes));
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
  ::gloo::BroadcastOptions options(call.context);
  options.setOutput(static_cast<uint8_t*>(data), bytes);
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
    if (incoming[peer] == nullptr) continue;
    WaitReceive(*incoming[peer], call);
    if (!unpacked[peer].empty()) Unpack(unpacked[peer], receive[peer], row_bytes);
  }
  for (Buffer& buffer : outgoing) {
    if (buffer != nullptr) WaitSend(*buffer, call);
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
  for (size_t done = 0; done < pieces; ++done) WaitSend(*buffer, call);
}

void Receive(const GlooCall& call, int peer, void* data, uint64_t bytes, uint64_t chunk_bytes) {
  if (bytes == 0) return;
  const uint64_t slot = SlotOf(kMessageSlot, call.tag);
  Buffer buffer = Wrap(call, data, bytes);
  const size_t pieces = PostPieces(bytes, chunk_bytes, [&](uint64_t at, uint64_t piece) {
    buffer->recv(peer, slot, at, piece);
  });
  for (size_t done = 0; done < pieces; ++done) WaitReceive(*buffer, call);
}

}  // namespace collective::daemon::gloo
