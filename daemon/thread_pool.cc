#include "daemon/thread_pool.h"

namespace collective::daemon {

ThreadPool::ThreadPool(size_t threads) {
  for (size_t i = 1; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::Run(size_t items, const std::function<void(size_t)>& fn) {
  if (items == 0) return;
  if (items == 1 || workers_.empty()) {
    for (size_t i = 0; i < items; ++i) fn(i);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    fn_ = &fn;
    items_ = items;
    next_item_ = 0;
    ++generation_;
  }
  work_ready_.notify_all();
  TakeItems();
  std::unique_lock lock(mutex_);
  work_done_.wait(lock, [this] { return next_item_ >= items_ && busy_ == 0; });
  fn_ = nullptr;
}

void ThreadPool::TakeItems() {
  std::unique_lock lock(mutex_);
  const std::function<void(size_t)>* fn = fn_;
  while (fn != nullptr && next_item_ < items_) {
    const size_t item = next_item_++;
    ++busy_;
    lock.unlock();
    (*fn)(item);
    lock.lock();
    --busy_;
  }
  if (next_item_ >= items_ && busy_ == 0) work_done_.notify_all();
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  std::unique_lock lock(mutex_);
  while (true) {
    work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    lock.unlock();
    TakeItems();
    lock.lock();
  }
}

}  // namespace collective::daemon
