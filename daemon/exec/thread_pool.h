// A fixed set of threads that share one piece of work at a time: the
// executor splits a large reduction into items and every thread, the caller
// included, takes items until none are left. Idle workers sleep on a
// condition variable (never spin: processes often outnumber cores).
//
// Work can also be started without the caller (Start): the workers take
// it while the caller does something else — the engine thread driving MPI
// while a cross-node collective's next chunk is reduced.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace collective::daemon::exec {

class ThreadPool {
 public:
  // Below this much work, waking the pool costs more than it saves: the
  // caller runs it itself.
  static constexpr uint64_t kInlineBytes = 256 << 10;

  // `threads` counts the caller: 1 means no extra threads.
  explicit ThreadPool(size_t threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Calls fn(i) for every i in [0, items), spread over the pool, and returns
  // when all calls have returned. One caller at a time.
  void Run(size_t items, const std::function<void(size_t)>& fn);

  // Starts fn(i) for every i in [0, items) on the workers and returns at
  // once; `done` is called (on a worker) when all have returned. Without
  // workers it all runs here, before Start returns. Until Busy() is false,
  // the caller must not Start again; a Run meanwhile first helps finish it.
  void Start(size_t items, std::function<void(size_t)> fn, std::function<void()> done);
  bool Busy() const;

  size_t size() const { return workers_.size() + 1; }

 private:
  void WorkerLoop();
  void TakeItems();
  // With the lock held: publishes fn over `items` as the next generation.
  void Publish(size_t items, const std::function<void(size_t)>* fn);
  void WaitUntilDone(std::unique_lock<std::mutex>& lock);

  mutable std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  const std::function<void(size_t)>* fn_ = nullptr;
  size_t items_ = 0;
  size_t next_item_ = 0;
  size_t busy_ = 0;  // workers inside the current generation's items
  uint64_t generation_ = 0;
  bool stopping_ = false;
  // What Start runs, kept alive here until it is done.
  std::function<void(size_t)> started_fn_;
  std::function<void()> started_done_;
  bool started_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace collective::daemon::exec
