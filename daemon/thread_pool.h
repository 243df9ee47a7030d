// A fixed set of threads that share one piece of work at a time: the
// executor splits a large reduction into items and every thread, the caller
// included, takes items until none are left. Idle workers sleep on a
// condition variable (never spin: processes often outnumber cores).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace collective::daemon {

class ThreadPool {
 public:
  // `threads` counts the caller: 1 means no extra threads.
  explicit ThreadPool(size_t threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Calls fn(i) for every i in [0, items), spread over the pool, and returns
  // when all calls have returned. One caller at a time.
  void Run(size_t items, const std::function<void(size_t)>& fn);

  size_t size() const { return workers_.size() + 1; }

 private:
  void WorkerLoop();
  void TakeItems();

  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  const std::function<void(size_t)>* fn_ = nullptr;
  size_t items_ = 0;
  size_t next_item_ = 0;
  size_t busy_ = 0;  // workers inside the current generation's items
  uint64_t generation_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace collective::daemon
