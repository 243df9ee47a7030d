#include "tests/unit/exec/fake_node_transport.h"

#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "daemon/exec/reduce_kernels.h"

namespace collective::daemon::exec {
namespace {

class FakeGroup : public job::NodeGroup {
 public:
  FakeGroup(int32_t group_id, int32_t group_size) : id(group_id), size(group_size) {}
  const int32_t id;
  const int32_t size;
};

enum class Kind {
  kAllreduce,
  kReduce,
  kReduceScatter,
  kAllgather,
  kGather,
  kBroadcast,
  kExchange,
  kMessage
};

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kAllreduce:
      return "allreduce";
    case Kind::kReduce:
      return "reduce";
    case Kind::kReduceScatter:
      return "reducescatter";
    case Kind::kAllgather:
      return "allgather";
    case Kind::kGather:
      return "gather";
    case Kind::kBroadcast:
      return "broadcast";
    case Kind::kExchange:
      return "exchange";
    case Kind::kMessage:
      return "message";
  }
  return "?";
}

}  // namespace

struct FakeFabric::Call {
  Kind kind = Kind::kAllreduce;
  void* data = nullptr;
  uint64_t count = 0;  // elements (reductions) or bytes (broadcast) or row bytes
  v1::DataType dtype = v1::DATA_TYPE_UNSPECIFIED;
  v1::ReduceOp op = v1::REDUCE_OP_SUM;
  std::vector<uint64_t> counts;  // reducescatter: per place; allgather: rows
  std::vector<uint64_t> displs;  // allgather
  int root = 0;
  std::vector<std::vector<RowBlock>> send, receive;  // exchange
};

struct FakeFabric::Meeting {
  std::vector<std::optional<Call>> by_place;
  int32_t arrived = 0;
  bool done = false;
  absl::Status status;
};

namespace {

// Whether every place's call is the same collective with the same shape.
absl::Status Paired(const std::vector<std::optional<FakeFabric::Call>>& calls) {
  const FakeFabric::Call& first = *calls.front();
  for (size_t place = 1; place < calls.size(); ++place) {
    const FakeFabric::Call& call = *calls[place];
    if (call.kind != first.kind || call.dtype != first.dtype || call.op != first.op ||
        call.root != first.root || call.counts != first.counts || call.displs != first.displs ||
        (call.kind != Kind::kExchange && call.count != first.count)) {
      return absl::InternalError(
          absl::StrCat("node at place ", place, " made a call that does not pair with place 0's"));
    }
  }
  return absl::OkStatus();
}

void Reduce(const std::vector<std::optional<FakeFabric::Call>>& calls, uint64_t count,
            std::vector<std::byte>& out) {
  const FakeFabric::Call& first = *calls.front();
  out.resize(count * ElementSize(first.dtype));
  std::vector<const void*> inputs;
  for (const auto& call : calls) inputs.push_back(call->data);
  exec::Reduce({.dtype = first.dtype, .op = first.op}, inputs, out.data(), count);
}

}  // namespace

std::shared_ptr<const job::NodeGroup> FakeFabric::NewGroup(int32_t size) {
  std::lock_guard lock(mutex_);
  return std::make_shared<FakeGroup>(next_group_++, size);
}

void FakeFabric::FailNext(absl::Status status) {
  std::lock_guard lock(mutex_);
  fail_next_ = std::move(status);
}

int FakeFabric::abandoned() const {
  std::lock_guard lock(mutex_);
  return abandoned_;
}

int FakeFabric::completed() const {
  std::lock_guard lock(mutex_);
  return completed_;
}

void FakeFabric::Abandon() {
  std::lock_guard lock(mutex_);
  ++abandoned_;
}

std::shared_ptr<FakeFabric::Meeting> FakeFabric::Join(const job::SetSpan& span, int32_t node,
                                                      Call call) {
  const auto& group = static_cast<const FakeGroup&>(*span.group);
  std::lock_guard lock(mutex_);
  const uint64_t sequence = calls_[{group.id, node}]++;
  std::shared_ptr<Meeting>& meeting = meetings_[{group.id, sequence}];
  if (meeting == nullptr) {
    meeting = std::make_shared<Meeting>();
    meeting->by_place.resize(static_cast<size_t>(group.size));
  }
  meeting->by_place[static_cast<size_t>(span.index)] = std::move(call);
  std::shared_ptr<Meeting> joined = meeting;
  if (++joined->arrived == group.size) {
    Happen(*joined);
    meetings_.erase({group.id, sequence});
  }
  return joined;
}

absl::StatusOr<bool> FakeFabric::Done(const Meeting& meeting) const {
  std::lock_guard lock(mutex_);
  if (!meeting.done) return false;
  if (!meeting.status.ok()) return meeting.status;
  return true;
}

std::vector<std::shared_ptr<FakeFabric::Meeting>> FakeFabric::Post(const job::SetSpan& span,
                                                                   int peer, bool send, void* data,
                                                                   uint64_t bytes, int tag,
                                                                   uint64_t chunk_bytes) {
  const auto& group = static_cast<const FakeGroup&>(*span.group);
  std::lock_guard lock(mutex_);
  const auto key =
      std::make_tuple(group.id, send ? span.index : peer, send ? peer : span.index, tag);
  std::deque<std::shared_ptr<Meeting>>& waiting = posts_[key];
  std::vector<std::shared_ptr<Meeting>> pieces;
  const uint64_t most = std::max<uint64_t>(chunk_bytes, 1);
  for (uint64_t at = 0; at < bytes || (bytes == 0 && at == 0);) {
    const uint64_t piece = std::min(most, bytes - at);
    Call call{.kind = Kind::kMessage, .data = static_cast<std::byte*>(data) + at, .count = piece};
    const size_t place = send ? 0 : 1;
    if (send) ++pieces_sent_;
    if (!waiting.empty() && !waiting.front()->by_place[place].has_value()) {
      std::shared_ptr<Meeting> meeting = std::move(waiting.front());
      waiting.pop_front();
      meeting->by_place[place] = std::move(call);
      meeting->done = true;
      ++completed_;
      const Call& sent = *meeting->by_place[0];
      const Call& received = *meeting->by_place[1];
      if (sent.count != received.count) {
        meeting->status = absl::InternalError("a message's pieces differ in size");
      } else if (sent.count > 0) {
        std::memcpy(received.data, sent.data, sent.count);
      }
      pieces.push_back(std::move(meeting));
    } else {
      auto meeting = std::make_shared<Meeting>();
      meeting->by_place.resize(2);
      meeting->by_place[place] = std::move(call);
      waiting.push_back(meeting);
      pieces.push_back(std::move(meeting));
    }
    at += piece;
    if (piece == 0) break;
  }
  if (waiting.empty()) posts_.erase(key);
  return pieces;
}

int FakeFabric::pieces_sent() const {
  std::lock_guard lock(mutex_);
  return pieces_sent_;
}

std::vector<std::string> FakeFabric::TakeKinds() {
  std::lock_guard lock(mutex_);
  return std::exchange(kinds_, {});
}

void FakeFabric::Happen(Meeting& meeting) {
  meeting.done = true;
  ++completed_;
  kinds_.push_back(KindName(meeting.by_place.front()->kind));
  if (!fail_next_.ok()) {
    meeting.status = std::exchange(fail_next_, absl::OkStatus());
    return;
  }
  meeting.status = Paired(meeting.by_place);
  if (!meeting.status.ok()) return;
  const auto& calls = meeting.by_place;
  const Call& first = *calls.front();
  std::vector<std::byte> combined;
  switch (first.kind) {
    case Kind::kAllreduce:
      Reduce(calls, first.count, combined);
      for (const auto& call : calls) std::memcpy(call->data, combined.data(), combined.size());
      return;
    case Kind::kReduce:
      Reduce(calls, first.count, combined);
      std::memcpy(calls[static_cast<size_t>(first.root)]->data, combined.data(), combined.size());
      return;
    case Kind::kReduceScatter: {
      uint64_t total = 0;
      for (uint64_t count : first.counts) total += count;
      Reduce(calls, total, combined);
      const uint64_t element = ElementSize(first.dtype);
      uint64_t at = 0;
      for (size_t place = 0; place < calls.size(); ++place) {
        std::memcpy(calls[place]->data, combined.data() + at * element,
                    first.counts[place] * element);
        at += first.counts[place];
      }
      return;
    }
    case Kind::kAllgather:
      for (size_t from = 0; from < calls.size(); ++from) {
        const uint64_t offset = first.displs[from] * first.count;
        const uint64_t bytes = first.counts[from] * first.count;
        for (size_t to = 0; to < calls.size(); ++to) {
          if (to == from || bytes == 0) continue;
          std::memcpy(static_cast<std::byte*>(calls[to]->data) + offset,
                      static_cast<const std::byte*>(calls[from]->data) + offset, bytes);
        }
      }
      return;
    case Kind::kGather:
      for (size_t from = 0; from < calls.size(); ++from) {
        const uint64_t offset = first.displs[from] * first.count;
        const uint64_t bytes = first.counts[from] * first.count;
        const auto to = static_cast<size_t>(first.root);
        if (to == from || bytes == 0) continue;
        std::memcpy(static_cast<std::byte*>(calls[to]->data) + offset,
                    static_cast<const std::byte*>(calls[from]->data) + offset, bytes);
      }
      return;
    case Kind::kBroadcast:
      for (size_t place = 0; place < calls.size(); ++place) {
        if (static_cast<int>(place) == first.root || first.count == 0) continue;
        std::memcpy(calls[place]->data, calls[static_cast<size_t>(first.root)]->data, first.count);
      }
      return;
    case Kind::kMessage:
      return;  // paired piece by piece in Post
    case Kind::kExchange:
      for (size_t from = 0; from < calls.size(); ++from) {
        for (size_t to = 0; to < calls.size(); ++to) {
          std::vector<std::byte> rows;
          for (const RowBlock& block : calls[from]->send[to]) {
            rows.insert(rows.end(), block.address, block.address + block.rows * first.count);
          }
          uint64_t at = 0;
          for (const RowBlock& block : calls[to]->receive[from]) {
            const uint64_t bytes = block.rows * first.count;
            if (at + bytes > rows.size()) {
              meeting.status = absl::InternalError("an exchange received more rows than sent");
              return;
            }
            std::memcpy(const_cast<std::byte*>(block.address), rows.data() + at, bytes);
            at += bytes;
          }
        }
      }
      return;
  }
}

namespace {

class FakePending : public PendingTransfer {
 public:
  FakePending(FakeFabric& fabric, std::shared_ptr<FakeFabric::Meeting> meeting)
      : fabric_(fabric), meeting_(std::move(meeting)) {}
  ~FakePending() override {
    if (!finished_) fabric_.Abandon();
  }
  absl::StatusOr<bool> Test() override {
    absl::StatusOr<bool> done = fabric_.Done(*meeting_);
    if (!done.ok() || *done) finished_ = true;
    return done;
  }

 private:
  FakeFabric& fabric_;
  std::shared_ptr<FakeFabric::Meeting> meeting_;
  bool finished_ = false;
};

// A message's pieces: done when every one happened.
class FakeMessagePending : public PendingTransfer {
 public:
  FakeMessagePending(FakeFabric& fabric, std::vector<std::shared_ptr<FakeFabric::Meeting>> pieces)
      : fabric_(fabric), pieces_(std::move(pieces)) {}
  ~FakeMessagePending() override {
    if (!finished_) fabric_.Abandon();
  }
  absl::StatusOr<bool> Test() override {
    for (const auto& piece : pieces_) {
      absl::StatusOr<bool> done = fabric_.Done(*piece);
      if (!done.ok()) {
        finished_ = true;
        return done;
      }
      if (!*done) return false;
    }
    finished_ = true;
    return true;
  }

 private:
  FakeFabric& fabric_;
  std::vector<std::shared_ptr<FakeFabric::Meeting>> pieces_;
  bool finished_ = false;
};

class FakeTransport : public NodeTransport {
 public:
  FakeTransport(FakeFabric& fabric, int32_t node) : fabric_(fabric), node_(node) {}

  absl::StatusOr<Pending> StartAllreduce(const job::SetSpan& span, void* data, uint64_t count,
                                         v1::DataType dtype, v1::ReduceOp op) override {
    return Start(
        span, {.kind = Kind::kAllreduce, .data = data, .count = count, .dtype = dtype, .op = op});
  }
  absl::StatusOr<Pending> StartReduce(const job::SetSpan& span, void* data, uint64_t count,
                                      v1::DataType dtype, v1::ReduceOp op, int root) override {
    return Start(span, {.kind = Kind::kReduce,
                        .data = data,
                        .count = count,
                        .dtype = dtype,
                        .op = op,
                        .root = root});
  }
  absl::StatusOr<Pending> StartReduceScatter(const job::SetSpan& span, void* data,
                                             const std::vector<uint64_t>& counts,
                                             v1::DataType dtype, v1::ReduceOp op) override {
    return Start(
        span,
        {.kind = Kind::kReduceScatter, .data = data, .dtype = dtype, .op = op, .counts = counts});
  }
  absl::StatusOr<Pending> StartAllgather(const job::SetSpan& span, void* data, uint64_t row_bytes,
                                         const std::vector<uint64_t>& rows,
                                         const std::vector<uint64_t>& displs) override {
    return Start(span, {.kind = Kind::kAllgather,
                        .data = data,
                        .count = row_bytes,
                        .counts = rows,
                        .displs = displs});
  }
  absl::StatusOr<Pending> StartGather(const job::SetSpan& span, void* data, uint64_t row_bytes,
                                      const std::vector<uint64_t>& rows,
                                      const std::vector<uint64_t>& displs, int root) override {
    return Start(span, {.kind = Kind::kGather,
                        .data = data,
                        .count = row_bytes,
                        .counts = rows,
                        .displs = displs,
                        .root = root});
  }
  absl::StatusOr<Pending> StartBroadcast(const job::SetSpan& span, void* data, uint64_t bytes,
                                         int root) override {
    return Start(span, {.kind = Kind::kBroadcast, .data = data, .count = bytes, .root = root});
  }
  absl::StatusOr<Pending> StartExchange(
      const job::SetSpan& span, uint64_t row_bytes, const std::vector<std::vector<RowBlock>>& send,
      const std::vector<std::vector<RowBlock>>& receive) override {
    return Start(span,
                 {.kind = Kind::kExchange, .count = row_bytes, .send = send, .receive = receive});
  }
  absl::StatusOr<Pending> StartSend(const job::SetSpan& span, int peer, const void* data,
                                    uint64_t bytes, int tag, uint64_t chunk_bytes) override {
    return std::make_unique<FakeMessagePending>(
        fabric_,
        fabric_.Post(span, peer, /*send=*/true, const_cast<void*>(data), bytes, tag, chunk_bytes));
  }
  absl::StatusOr<Pending> StartReceive(const job::SetSpan& span, int peer, void* data,
                                       uint64_t bytes, int tag, uint64_t chunk_bytes) override {
    return std::make_unique<FakeMessagePending>(
        fabric_, fabric_.Post(span, peer, /*send=*/false, data, bytes, tag, chunk_bytes));
  }

 private:
  absl::StatusOr<Pending> Start(const job::SetSpan& span, FakeFabric::Call call) {
    if (span.index < 0 || span.index >= span.size()) {
      return absl::InvalidArgumentError("this node is not in the set's group");
    }
    return std::make_unique<FakePending>(fabric_, fabric_.Join(span, node_, std::move(call)));
  }

  FakeFabric& fabric_;
  const int32_t node_;
};

}  // namespace

std::unique_ptr<NodeTransport> FakeFabric::TransportOf(int32_t node) {
  return std::make_unique<FakeTransport>(*this, node);
}

}  // namespace collective::daemon::exec
