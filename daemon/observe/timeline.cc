#include "daemon/observe/timeline.h"

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#include <unistd.h>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "daemon/job/open_as_owner.h"
#include "daemon/observe/trace_event.h"

namespace collective::daemon::observe {
namespace {

// Tensors are pids 1, 2, ...; marks that belong to no tensor (cycles,
// dropped events) are global-scope instants, which viewers draw across every
// row whatever their pid.
constexpr int64_t kGlobalPid = 0;
constexpr int64_t kDaemonTid = 0;
// The writer keeps a buffer this large between batches; a burst's larger one
// goes back to the allocator.
constexpr size_t kKeptBufferBytes = size_t{1} << 20;

std::string NegotiateName(v1::Collective collective) {
  const absl::string_view name = absl::StripPrefix(v1::Collective_Name(collective), "COLLECTIVE_");
  if (name.empty()) return absl::StrCat("NEGOTIATE_", static_cast<int>(collective));
  return absl::StrCat("NEGOTIATE_", name);
}

}  // namespace

// All of the timeline's state. The engine formats events straight into
// `pending_` under `mutex_`; the writer thread swaps the whole buffer out
// and writes it with the lock released, so the engine waits at most for a
// swap, never for the disk. Start and Stop are serialised by
// `control_mutex_`, which the engine never takes, so a slow open (say, on
// NFS) does not stall it either.
class Timeline::Writer {
 public:
  explicit Writer(uint64_t max_queued_bytes) : max_queued_bytes_(max_queued_bytes) {}
  ~Writer() {
    if (active()) Stop().IgnoreError();
  }

  absl::Status Start(const std::string& path, bool mark_cycles, const job::PeerCredentials& owner);
  absl::Status Stop();

  bool active() const { return active_.load(std::memory_order_acquire); }
  bool mark_cycles() const { return mark_cycles_.load(std::memory_order_relaxed); }
  std::string path() const {
    std::lock_guard lock(mutex_);
    return path_;
  }
  uint64_t events_written() const { return events_written_.load(std::memory_order_relaxed); }

  // Calls format(*this) to append `events` events while recording (and, for
  // a cycle mark, marking cycles); counts them as dropped instead while the
  // writer is too far behind.
  template <typename Format>
  void Record(uint64_t events, Format&& format, bool is_cycle_mark = false);

  // For Record's `format`, which runs under `mutex_`. Each trace row's
  // metadata is emitted the first time the row is used.
  struct TensorRows {
    int64_t pid = 0;
    absl::flat_hash_set<int32_t> named_ranks;
  };
  TensorRows& Tensor(const std::string& name);
  int64_t RankThread(TensorRows& rows, int32_t rank);
  // The buffer, with the separator from the previous event appended.
  std::string& NextEvent();
  // Nanoseconds since Start; earlier times are clipped to 0.
  uint64_t Since(uint64_t ns) const { return ns > start_ns_ ? ns - start_ns_ : 0; }

 private:
  void Run();
  // Writes everything or records the first error; writer thread, or Stop
  // once the writer has finished.
  bool WriteAll(absl::string_view data);
  // Under mutex_; returns the count noted.
  uint64_t AppendDropNote();

  const uint64_t max_queued_bytes_;
  std::mutex control_mutex_;  // serialises Start and Stop
  std::atomic<bool> active_{false};
  std::atomic<bool> mark_cycles_{false};
  std::atomic<uint64_t> events_written_{0};

  mutable std::mutex mutex_;
  std::condition_variable wake_;  // the writer: work queued, or stopping
  bool recording_ = false;
  bool stopping_ = false;
  bool marking_cycles_ = false;
  std::string path_;
  uint64_t start_ns_ = 0;
  absl::flat_hash_map<std::string, TensorRows> tensors_;
  int64_t next_pid_ = 1;
  std::string pending_;  // formatted events, not yet handed to the writer
  uint64_t pending_events_ = 0;
  uint64_t in_flight_bytes_ = 0;  // what the writer is writing now
  bool first_event_ = true;
  uint64_t dropped_ = 0;  // while non-zero, everything is dropped

  // Set by Start before the writer thread starts, used by it alone until
  // Stop joins it.
  int fd_ = -1;
  absl::Status write_error_;
  std::thread thread_;
};

absl::Status Timeline::Writer::Start(const std::string& path, bool mark_cycles,
                                     const job::PeerCredentials& owner) {
  std::lock_guard control(control_mutex_);
  if (active()) {
    return absl::FailedPreconditionError(
        absl::StrCat("a timeline is already recording to ", path_, "; stop it first"));
  }
  if (path.empty()) return absl::InvalidArgumentError("the timeline file path is empty");
  if (absl::StrContains(path, absl::string_view("\0", 1))) {
    return absl::InvalidArgumentError("the timeline file path contains a NUL byte");
  }
  if (path.front() != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("the timeline file path '", path,
                     "' is relative; give an absolute path (collectived's working directory "
                     "means nothing to the caller)"));
  }
  ASSIGN_OR_RETURN_WITH(const int fd, job::OpenForWritingAs(path, owner),
                        "cannot start the timeline");

  {
    std::lock_guard lock(mutex_);
    recording_ = true;
    stopping_ = false;
    marking_cycles_ = mark_cycles;
    path_ = path;
    start_ns_ = MonotonicNanos();
    tensors_.clear();
    next_pid_ = 1;
    pending_ = "[\n";
    pending_events_ = 0;
    in_flight_bytes_ = 0;
    first_event_ = true;
    dropped_ = 0;
    fd_ = fd;
    write_error_ = absl::OkStatus();
    events_written_.store(0, std::memory_order_relaxed);
  }
  try {
    thread_ = std::thread([this] { Run(); });
  } catch (const std::system_error& e) {
    std::lock_guard lock(mutex_);
    recording_ = false;
    ::close(fd_);
    fd_ = -1;
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot start the timeline's writer thread: ", e.what()));
  }
  mark_cycles_.store(mark_cycles, std::memory_order_relaxed);
  active_.store(true, std::memory_order_release);
  return absl::OkStatus();
}

absl::Status Timeline::Writer::Stop() {
  std::lock_guard control(control_mutex_);
  {
    std::lock_guard lock(mutex_);
    if (!recording_) return absl::FailedPreconditionError("no timeline is recording");
    recording_ = false;
    stopping_ = true;
    active_.store(false, std::memory_order_release);
    mark_cycles_.store(false, std::memory_order_relaxed);
  }
  wake_.notify_one();
  thread_.join();

  WriteAll("\n]\n");
  if (::close(fd_) != 0 && write_error_.ok()) {
    const int error = errno;
    write_error_ = absl::ErrnoToStatus(error, "close failed");
  }
  fd_ = -1;
  {
    std::lock_guard lock(mutex_);
    tensors_ = {};
    pending_ = {};
  }
  const uint64_t written = events_written();
  if (!write_error_.ok()) {
    return absl::Status(write_error_.code(),
                        absl::StrCat("the timeline file ", path_, " is incomplete (", written,
                                     " events written): ", write_error_.message()));
  }
  return absl::OkStatus();
}

template <typename Format>
void Timeline::Writer::Record(uint64_t events, Format&& format, bool is_cycle_mark) {
  if (!active()) return;
  bool wake = false;
  {
    std::lock_guard lock(mutex_);
    if (!recording_ || (is_cycle_mark && !marking_cycles_)) return;
    // Once dropping starts it goes on until the writer has caught up, so
    // that the trace has one gap with one note rather than many.
    if (dropped_ > 0 || pending_.size() + in_flight_bytes_ >= max_queued_bytes_) {
      dropped_ += events;
      return;
    }
    wake = pending_.empty();
    format(*this);
  }
  // The writer takes everything queued when it wakes, so only the first
  // event after it emptied the queue needs to wake it.
  if (wake) wake_.notify_one();
}

Timeline::Writer::TensorRows& Timeline::Writer::Tensor(const std::string& name) {
  const auto [it, inserted] = tensors_.try_emplace(name);
  TensorRows& rows = it->second;
  if (inserted) {
    rows.pid = next_pid_++;
    TraceEvent(NextEvent(), "process_name", "M", rows.pid, kDaemonTid).Arg("name", name).Close();
    TraceEvent(NextEvent(), "process_sort_index", "M", rows.pid, kDaemonTid)
        .Arg("sort_index", rows.pid)
        .Close();
    TraceEvent(NextEvent(), "thread_name", "M", rows.pid, kDaemonTid).Arg("name", "daemon").Close();
    TraceEvent(NextEvent(), "thread_sort_index", "M", rows.pid, kDaemonTid)
        .Arg("sort_index", kDaemonTid)
        .Close();
  }
  return rows;
}

int64_t Timeline::Writer::RankThread(TensorRows& rows, int32_t rank) {
  const int64_t tid = int64_t{1} + rank;
  if (rows.named_ranks.insert(rank).second) {
    TraceEvent(NextEvent(), "thread_name", "M", rows.pid, tid)
        .Arg("name", absl::StrCat("rank ", rank))
        .Close();
    // Sorted by rank rather than by name ("rank 10" before "rank 2").
    TraceEvent(NextEvent(), "thread_sort_index", "M", rows.pid, tid).Arg("sort_index", tid).Close();
  }
  return tid;
}

std::string& Timeline::Writer::NextEvent() {
  if (!first_event_) pending_ += ",\n";
  first_event_ = false;
  ++pending_events_;
  return pending_;
}

uint64_t Timeline::Writer::AppendDropNote() {
  TraceEvent(NextEvent(), "EVENTS_DROPPED", "i", kGlobalPid, kDaemonTid)
      .Time(Since(MonotonicNanos()))
      .Scope("g")
      .Arg("count", dropped_)
      .Close();
  return std::exchange(dropped_, 0);
}

void Timeline::Writer::Run() {
  std::string batch;
  uint64_t noted = 0;  // dropped events just noted, to log with the lock released
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock, [this] { return !pending_.empty() || stopping_; });
    if (pending_.empty()) {
      // Stopping. Events dropped while nothing was queued (a zero bound)
      // still get their note.
      if (dropped_ == 0) return;
      noted = AppendDropNote();
    }
    batch.swap(pending_);
    const uint64_t events = std::exchange(pending_events_, 0);
    in_flight_bytes_ = batch.size();
    lock.unlock();

    if (noted > 0) {
      log::Daemon().warn(
          "timeline {}: the disk did not keep up ({} bytes queued); dropped {} events, marked "
          "EVENTS_DROPPED in the trace",
          path_, max_queued_bytes_, std::exchange(noted, 0));
    }
    if (WriteAll(batch)) events_written_.fetch_add(events, std::memory_order_relaxed);
    if (batch.capacity() > kKeptBufferBytes) {
      std::string().swap(batch);
    } else {
      batch.clear();
    }

    lock.lock();
    in_flight_bytes_ = 0;
    // Caught up: everything from before the gap is in the file.
    if (dropped_ > 0 && pending_.empty()) noted = AppendDropNote();
  }
}

bool Timeline::Writer::WriteAll(absl::string_view data) {
  // After a failure nothing more is written: the file would have a hole.
  if (!write_error_.ok()) return false;
  while (!data.empty()) {
    const ssize_t written = ::write(fd_, data.data(), data.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      write_error_ = absl::ErrnoToStatus(error, "write failed");
      log::Daemon().error("timeline {}: {}; later events are dropped", path_,
                          write_error_.message());
      return false;
    }
    data.remove_prefix(static_cast<size_t>(written));
  }
  return true;
}

Timeline::Timeline() : Timeline(kDefaultMaxQueuedBytes) {}

Timeline::Timeline(uint64_t max_queued_bytes)
    : writer_(std::make_unique<Writer>(max_queued_bytes)) {}

Timeline::~Timeline() = default;

absl::Status Timeline::Start(const std::string& path, bool mark_cycles,
                             const job::PeerCredentials& owner) {
  return writer_->Start(path, mark_cycles, owner);
}

absl::Status Timeline::Stop() { return writer_->Stop(); }

bool Timeline::active() const { return writer_->active(); }
bool Timeline::mark_cycles() const { return writer_->mark_cycles(); }
std::string Timeline::path() const { return writer_->path(); }
uint64_t Timeline::events_written() const { return writer_->events_written(); }

void Timeline::Negotiation(const std::string& tensor, v1::Collective collective, uint64_t first_ns,
                           uint64_t ready_ns, std::span<const RankArrival> arrivals) {
  writer_->Record(1 + arrivals.size(), [&](Writer& writer) {
    const int64_t pid = writer.Tensor(tensor).pid;
    const uint64_t start = writer.Since(first_ns);
    const uint64_t end = writer.Since(ready_ns);
    TraceEvent(writer.NextEvent(), NegotiateName(collective), "X", pid, kDaemonTid)
        .Time(start)
        .Duration(end > start ? end - start : 0)
        .Close();
    for (const RankArrival& arrival : arrivals) {
      TraceEvent(writer.NextEvent(), absl::StrCat("rank ", arrival.rank), "i", pid, kDaemonTid)
          .Time(writer.Since(arrival.at_ns))
          .Scope("t")
          .Arg("rank", arrival.rank)
          .Close();
    }
  });
}

void Timeline::Phase(const std::string& tensor, absl::string_view phase, uint64_t start_ns,
                     uint64_t end_ns, uint64_t bytes) {
  writer_->Record(1, [&](Writer& writer) {
    const int64_t pid = writer.Tensor(tensor).pid;
    const uint64_t start = writer.Since(start_ns);
    const uint64_t end = writer.Since(end_ns);
    TraceEvent(writer.NextEvent(), phase, "X", pid, kDaemonTid)
        .Time(start)
        .Duration(end > start ? end - start : 0)
        .Arg("bytes", bytes)
        .Close();
  });
}

void Timeline::CopyOut(const std::string& tensor, int32_t rank, uint64_t start_ns,
                       uint64_t end_ns) {
  if (rank < 0) return;  // no row to put it on
  writer_->Record(1, [&](Writer& writer) {
    Writer::TensorRows& rows = writer.Tensor(tensor);
    const int64_t tid = writer.RankThread(rows, rank);
    const uint64_t start = writer.Since(start_ns);
    const uint64_t end = writer.Since(end_ns);
    TraceEvent(writer.NextEvent(), exec::kPhaseCopyOut, "X", rows.pid, tid)
        .Time(start)
        .Duration(end > start ? end - start : 0)
        .Close();
  });
}

void Timeline::Cycle(uint64_t at_ns) {
  if (!writer_->mark_cycles()) return;
  writer_->Record(
      1,
      [&](Writer& writer) {
        TraceEvent(writer.NextEvent(), "CYCLE", "i", kGlobalPid, kDaemonTid)
            .Time(writer.Since(at_ns))
            .Scope("g")
            .Close();
      },
      /*is_cycle_mark=*/true);
}

}  // namespace collective::daemon::observe
