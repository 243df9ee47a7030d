#include "daemon/gloo/gloo_transport.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "daemon/exec/reduce_kernels.h"
#include "daemon/gloo/gloo_failures.h"
#include "daemon/gloo/gloo_group.h"
#include "daemon/gloo/gloo_transfers.h"

namespace collective::daemon::gloo {
namespace {

// A transfer's outcome: written once by the thread that ran it, then read
// by the engine thread through Test().
class Completion {
 public:
  void Finish(absl::Status status) {
    status_ = std::move(status);
    done_.store(true, std::memory_order_release);
  }
  bool done() const { return done_.load(std::memory_order_acquire); }
  // Once done().
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
  std::atomic<bool> done_{false};
};

// Destroying one abandons nothing but the view: the transfer runs on (see
// the header's rule on memory).
class GlooPending : public exec::PendingTransfer {
 public:
  explicit GlooPending(std::shared_ptr<const Completion> completion)
      : completion_(std::move(completion)) {}

  absl::StatusOr<bool> Test() override {
    if (!completion_->done()) return false;
    if (!completion_->status().ok()) return completion_->status();
    return true;
  }

 private:
  std::shared_ptr<const Completion> completion_;
};

absl::Status Annotated(const char* what, const absl::Status& cause) {
  return absl::Status(cause.code(), absl::StrCat(what, " across nodes failed: ", cause.message()));
}

}  // namespace

// One context: its worker thread, which runs the context's collectives in
// start order; its watcher thread, which notices a failed connection or a
// peer's goodbye; the buffers its calls wait on; and the cause of its
// failure, shared with the message threads on the same context. The queue
// and the cause are under mutex_; the tag counter is the engine thread's.
class GlooTransport::Channel {
 public:
  Channel(std::shared_ptr<::gloo::Context> context, std::vector<int32_t> nodes,
          const GlooTransportOptions& options)
      : context_(std::move(context)),
        nodes_(std::move(nodes)),
        options_(options),
        goodbyes_(static_cast<size_t>(context_->size), kNoGoodbye),
        worker_([this] { Run(); }),
        watcher_([this] { Watch(); }) {}

  ~Channel() { Stop(); }

  // By context rank: "1 (host-b)", or "1" where the host is not known.
  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    for (const int32_t node : nodes_) {
      const size_t at = static_cast<size_t>(node);
      names.push_back(at < options_.hosts.size() && !options_.hosts[at].empty()
                          ? absl::StrCat(node, " (", options_.hosts[at], ")")
                          : absl::StrCat(node));
    }
    return names;
  }

  const std::shared_ptr<::gloo::Context>& context() const { return context_; }
  BufferWaits& waits() { return waits_; }
  bool Idle() {
    std::lock_guard<std::mutex> lock(mutex_);
    return queue_.empty() && !running_;
  }

  // Engine thread.
  void Enqueue(const char* what, Work work, std::shared_ptr<Completion> completion) {
    Job job{.what = what,
            .work = std::move(work),
            .call = {.context = context_,
                     .tag = next_tag_++,
                     .timeout = options_.timeout,
                     .waits = &waits_},
            .completion = std::move(completion)};
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(job));
    wake_worker_.notify_one();
  }

  // Runs `work` on the calling (worker) thread unless the context broke;
  // a Gloo exception breaks it, with the cause it finds.
  absl::Status Execute(const char* what, const Work& work, const GlooCall& call) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!cause_.ok()) return Annotated(what, cause_);
    }
    std::string error;
    try {
      work(call);
      return absl::OkStatus();
    } catch (const std::exception& thrown) {
      error = thrown.what();
    } catch (...) {
      error = "an exception that is not a std::exception";
    }
    return Annotated(what, Fail(error));
  }

  // The context's failure: the first one found describes it and breaks the
  // context; the later ones get the same cause.
  absl::Status Fail(const std::string& error) {
    absl::Status cause;
    int lost = -1;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!cause_.ok()) return cause_;
      ContextFailure failure =
          DescribeFailure(*context_, Names(), error, options_.timeout, goodbyes_);
      cause_ = failure.cause;
      cause = cause_;
      lost = failure.lost >= 0 ? failure.lost : context_->rank;
    }
    BreakAll(lost);
    return cause;
  }

  // Any thread: `why` becomes the cause unless the context already broke;
  // then its blocked calls return.
  // `lost`: the job node that is gone (its place goes in the goodbyes), or
  // -1: this node leaves.
  void Break(const absl::Status& why, int lost = -1) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cause_.ok()) cause_ = why;
    }
    const auto place = std::find(nodes_.begin(), nodes_.end(), lost);
    BreakAll(place != nodes_.end() ? static_cast<int>(place - nodes_.begin()) : context_->rank);
  }

  // Runs what is queued (at once if the context broke), then joins the
  // worker and the watcher.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      wake_worker_.notify_one();
    }
    if (worker_.joinable()) worker_.join();
    waits_.AbortAll();  // ends the watcher's wait
    if (watcher_.joinable()) watcher_.join();
  }

 private:
  struct Job {
    const char* what = nullptr;
    Work work;
    GlooCall call;
    std::shared_ptr<Completion> completion;
  };

  // Tells the peers which node was lost (`lost`), closes the context's
  // connections, then ends the waits Gloo would leave waiting
  // (gloo_transfers.h): once they return, nothing touches the buffers of
  // their calls.
  void BreakAll(int lost) {
    SayGoodbye(*context_, lost);
    BreakContext(*context_);
    waits_.AbortAll();
  }

  // The watcher: fails the context as soon as a connection fails or a peer
  // says goodbye, even with no transfer waiting on it.
  void Watch() {
    std::optional<std::string> seen = WatchContext(*context_, waits_, goodbyes_);
    if (seen.has_value()) {
      // Recorded for the transfers; nobody waits on the watcher itself.
      Fail(seen->empty() ? "a peer broke the context" : *seen).IgnoreError();
    }
  }

  void Run() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_worker_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
        running_ = true;
      }
      job.completion->Finish(Execute(job.what, job.work, job.call));
      {
        std::lock_guard<std::mutex> lock(mutex_);
        running_ = false;
      }
      if (options_.wake) options_.wake();
    }
  }

  const std::shared_ptr<::gloo::Context> context_;
  const std::vector<int32_t> nodes_;  // by context rank
  const GlooTransportOptions options_;
  uint32_t next_tag_ = 0;
  BufferWaits waits_;

  std::mutex mutex_;
  std::condition_variable wake_worker_;
  std::deque<Job> queue_;
  bool running_ = false;
  bool stopping_ = false;
  absl::Status cause_;  // OK while the context works
  // By context rank: what each peer said when it broke the context, as
  // Gloo's event loop wrote it (WatchContext).
  std::vector<int32_t> goodbyes_;

  // Last: they start once the rest is built.
  std::thread worker_;
  std::thread watcher_;
};

// The threads of point-to-point messages in flight, one each (see the
// header: their waits cannot be polled). Engine thread only.
class GlooTransport::MessageThreads {
 public:
  ~MessageThreads() { JoinAll(); }

  void Start(std::shared_ptr<const Completion> completion, std::function<void()> body) {
    Reap();
    threads_.push_back({std::move(completion), std::thread(std::move(body))});
  }

  // Joins the threads whose message finished (they are exiting).
  void Reap() {
    for (auto it = threads_.begin(); it != threads_.end();) {
      if (!it->completion->done()) {
        ++it;
        continue;
      }
      it->thread.join();
      it = threads_.erase(it);
    }
  }

  void JoinAll() {
    for (Running& running : threads_) running.thread.join();
    threads_.clear();
  }

 private:
  struct Running {
    std::shared_ptr<const Completion> completion;
    std::thread thread;
  };
  std::list<Running> threads_;
};

GlooTransport::GlooTransport(GlooTransportOptions options)
    : options_(std::move(options)), messages_(std::make_unique<MessageThreads>()) {}

GlooTransport::~GlooTransport() { Abort("the job's world was torn down"); }

void GlooTransport::Abort(const std::string& why, int lost) {
  if (aborted_.ok()) aborted_ = absl::AbortedError(why);
  for (auto& [context, channel] : channels_) channel->Break(aborted_, lost);
  for (auto& [context, channel] : channels_) channel->Stop();
  messages_->JoinAll();
  channels_.clear();
}

absl::StatusOr<std::shared_ptr<GlooTransport::Channel>> GlooTransport::ChannelOf(
    const job::SetSpan& span) {
  const auto* group = dynamic_cast<const GlooGroup*>(span.group.get());
  if (group == nullptr || group->context() == nullptr) {
    return absl::InternalError("the set's nodes have no Gloo context");
  }
  const std::shared_ptr<::gloo::Context>& context = group->context();
  if (context->size != span.size() || context->rank != span.index) {
    return absl::InternalError(absl::StrCat("the set's Gloo context has rank ", context->rank,
                                            " of ", context->size, ", the set's nodes place ",
                                            span.index, " of ", span.size()));
  }
  // A context that only its channel holds serves nothing any more.
  for (auto it = channels_.begin(); it != channels_.end();) {
    if (it->second.use_count() == 1 && it->second->context().use_count() == 1 &&
        it->second->Idle()) {
      it = channels_.erase(it);  // joins its idle worker
    } else {
      ++it;
    }
  }
  std::shared_ptr<Channel>& channel = channels_[context.get()];
  if (channel == nullptr) channel = std::make_shared<Channel>(context, span.nodes, options_);
  return channel;
}

absl::StatusOr<exec::Pending> GlooTransport::Collective(const job::SetSpan& span, const char* what,
                                                        Work work) {
  if (!aborted_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " across nodes cannot start: ", aborted_.message()));
  }
  absl::StatusOr<std::shared_ptr<Channel>> channel = ChannelOf(span);
  if (!channel.ok()) return channel.status();
  auto completion = std::make_shared<Completion>();
  (*channel)->Enqueue(what, std::move(work), completion);
  return std::make_unique<GlooPending>(std::move(completion));
}

absl::StatusOr<exec::Pending> GlooTransport::Message(const job::SetSpan& span, int peer,
                                                     const char* what, int tag, Work work) {
  if (!aborted_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " across nodes cannot start: ", aborted_.message()));
  }
  if (peer < 0 || peer >= span.size() || peer == span.index) {
    return absl::InvalidArgumentError(absl::StrCat(what, " across nodes to place ", peer,
                                                   " of a set on ", span.size(), " nodes"));
  }
  absl::StatusOr<std::shared_ptr<Channel>> channel = ChannelOf(span);
  if (!channel.ok()) return channel.status();
  auto completion = std::make_shared<Completion>();
  const GlooCall call{.context = (*channel)->context(),
                      .tag = static_cast<uint32_t>(tag),
                      .timeout = options_.timeout,
                      .waits = &(*channel)->waits()};
  messages_->Start(completion, [channel = *channel, call, what, work = std::move(work), completion,
                                wake = options_.wake] {
    completion->Finish(channel->Execute(what, work, call));
    if (wake) wake();
  });
  return std::make_unique<GlooPending>(std::move(completion));
}

namespace {

// What the kernels can combine (exec/reduce_kernels.h).
absl::Status CheckReducible(v1::DataType dtype, v1::ReduceOp op) {
  if (ElementSize(dtype) != 0 && exec::IsReducible(dtype, op)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "cannot combine ", DataTypeName(dtype), " tensors with ", ReduceOpName(op), " across nodes"));
}

absl::Status CheckPlace(const job::SetSpan& span, int place, const char* what) {
  if (place >= 0 && place < span.size()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " across nodes with root at place ", place, " of ", span.size()));
}

absl::Status CheckPerNode(const job::SetSpan& span, size_t size, const char* what,
                          const char* list) {
  if (size == static_cast<size_t>(span.size())) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " across nodes with ", size, " ", list, " for ", span.size(), " nodes"));
}

}  // namespace

absl::StatusOr<exec::Pending> GlooTransport::StartAllreduce(const job::SetSpan& span, void* data,
                                                            uint64_t count, v1::DataType dtype,
                                                            v1::ReduceOp op) {
  if (absl::Status checked = CheckReducible(dtype, op); !checked.ok()) return checked;
  const exec::ReduceSpec spec{.dtype = dtype, .op = op};
  return Collective(span, "allreduce", [data, count, spec](const GlooCall& call) {
    Allreduce(call, data, count, spec);
  });
}

absl::StatusOr<exec::Pending> GlooTransport::StartReduce(const job::SetSpan& span, void* data,
                                                         uint64_t count, v1::DataType dtype,
                                                         v1::ReduceOp op, int root) {
  if (absl::Status checked = CheckPlace(span, root, "reduce"); !checked.ok()) return checked;
  if (absl::Status checked = CheckReducible(dtype, op); !checked.ok()) return checked;
  const exec::ReduceSpec spec{.dtype = dtype, .op = op};
  return Collective(span, "reduce", [data, count, spec, root](const GlooCall& call) {
    Reduce(call, data, count, spec, root);
  });
}

absl::StatusOr<exec::Pending> GlooTransport::StartReduceScatter(const job::SetSpan& span,
                                                                void* data,
                                                                const std::vector<uint64_t>& counts,
                                                                v1::DataType dtype,
                                                                v1::ReduceOp op) {
  if (absl::Status checked = CheckPerNode(span, counts.size(), "reducescatter", "counts");
      !checked.ok()) {
    return checked;
  }
  if (absl::Status checked = CheckReducible(dtype, op); !checked.ok()) return checked;
  const exec::ReduceSpec spec{.dtype = dtype, .op = op};
  return Collective(span, "reducescatter", [data, counts, spec](const GlooCall& call) {
    ReduceScatter(call, data, counts, spec);
  });
}

absl::StatusOr<exec::Pending> GlooTransport::StartAllgather(const job::SetSpan& span, void* data,
                                                            uint64_t row_bytes,
                                                            const std::vector<uint64_t>& rows,
                                                            const std::vector<uint64_t>& displs) {
  if (absl::Status checked = CheckPerNode(span, rows.size(), "allgather", "row counts");
      !checked.ok()) {
    return checked;
  }
  if (absl::Status checked = CheckPerNode(span, displs.size(), "allgather", "offsets");
      !checked.ok()) {
    return checked;
  }
  return Collective(span, "allgather", [data, row_bytes, rows, displs](const GlooCall& call) {
    Allgather(call, data, row_bytes, rows, displs);
  });
}

absl::StatusOr<exec::Pending> GlooTransport::StartGather(const job::SetSpan& span, void* data,
                                                         uint64_t row_bytes,
                                                         const std::vector<uint64_t>& rows,
                                                         const std::vector<uint64_t>& displs,
                                                         int root) {
  if (absl::Status checked = CheckPlace(span, root, "gather"); !checked.ok()) return checked;
  if (absl::Status checked = CheckPerNode(span, rows.size(), "gather", "row counts");
      !checked.ok()) {
    return checked;
  }
  if (absl::Status checked = CheckPerNode(span, displs.size(), "gather", "offsets");
      !checked.ok()) {
    return checked;
  }
  return Collective(span, "gather", [data, row_bytes, rows, displs, root](const GlooCall& call) {
    Gather(call, data, row_bytes, rows, displs, root);
  });
}

absl::StatusOr<exec::Pending> GlooTransport::StartBroadcast(const job::SetSpan& span, void* data,
                                                            uint64_t bytes, int root) {
  if (absl::Status checked = CheckPlace(span, root, "broadcast"); !checked.ok()) return checked;
  return Collective(span, "broadcast", [data, bytes, root](const GlooCall& call) {
    Broadcast(call, data, bytes, root);
  });
}

absl::StatusOr<exec::Pending> GlooTransport::StartExchange(
    const job::SetSpan& span, uint64_t row_bytes,
    const std::vector<std::vector<exec::RowBlock>>& send,
    const std::vector<std::vector<exec::RowBlock>>& receive) {
  if (absl::Status checked = CheckPerNode(span, send.size(), "alltoall", "lists of blocks to send");
      !checked.ok()) {
    return checked;
  }
  if (absl::Status checked =
          CheckPerNode(span, receive.size(), "alltoall", "lists of blocks to receive");
      !checked.ok()) {
    return checked;
  }
  return Collective(span, "alltoall", [row_bytes, send, receive](const GlooCall& call) {
    Exchange(call, row_bytes, send, receive);
  });
}

absl::StatusOr<exec::Pending> GlooTransport::StartSend(const job::SetSpan& span, int peer,
                                                       const void* data, uint64_t bytes, int tag,
                                                       uint64_t chunk_bytes) {
  return Message(span, peer, "send of a message", tag,
                 [peer, data, bytes, chunk_bytes](const GlooCall& call) {
                   Send(call, peer, data, bytes, chunk_bytes);
                 });
}

absl::StatusOr<exec::Pending> GlooTransport::StartReceive(const job::SetSpan& span, int peer,
                                                          void* data, uint64_t bytes, int tag,
                                                          uint64_t chunk_bytes) {
  return Message(span, peer, "receive of a message", tag,
                 [peer, data, bytes, chunk_bytes](const GlooCall& call) {
                   Receive(call, peer, data, bytes, chunk_bytes);
                 });
}

}  // namespace collective::daemon::gloo
