#include "daemon/exec/thread_pool.h"

namespace collective::daemon::exec {

ThreadPool::ThreadPool(size_t threads) {
  for (size_t i = 1; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::unique_lock lock(mutex_);
    if (started_) WaitUntilDone(lock);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::Publish(size_t items, const std::function<void(size_t)>* fn) {
  fn_ = fn;
  items_ = items;
  next_item_ = 0;
  ++generation_;
}

void ThreadPool::WaitUntilDone(std::unique_lock<std::mutex>& lock) {
  work_done_.wait(lock, [this] { return next_item_ >= items_ && busy_ == 0 && !started_; });
}

void ThreadPool::Run(size_t items, const std::function<void(size_t)>& fn) {
  if (Busy()) {
    TakeItems();  // help finish what Start began
    std::unique_lock lock(mutex_);
    WaitUntilDone(lock);
  }
  if (items == 0) return;
  if (items == 1 || workers_.empty()) {
    for (size_t i = 0; i < items; ++i) fn(i);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    Publish(items, &fn);
  }
  work_ready_.notify_all();
  TakeItems();
  std::unique_lock lock(mutex_);
  WaitUntilDone(lock);
  fn_ = nullptr;
}

void ThreadPool::Start(size_t items, std::function<void(size_t)> fn, std::function<void()> done) {
  if (workers_.empty() || items == 0) {
    for (size_t i = 0; i < items; ++i) fn(i);
    done();
    return;
  }
  {
    std::lock_guard lock(mutex_);
    started_fn_ = std::move(fn);
    started_done_ = std::move(done);
    started_ = true;
    Publish(items, &started_fn_);
  }
  work_ready_.notify_all();
}

bool ThreadPool::Busy() const {
  std::lock_guard lock(mutex_);
  return started_;
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
  if (next_item_ >= items_ && busy_ == 0) {
    if (started_) {
      // The last item of started work: say so, then let Run and Start in.
      std::function<void()> done = std::move(started_done_);
      started_ = false;
      fn_ = nullptr;
      lock.unlock();
      done();
      lock.lock();
    }
    work_done_.notify_all();
  }
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

}  // namespace collective::daemon::exec
