// The connection collective.tensorflow's kernels submit through: a C-ABI
// handle borrowed from collective._core's Client (the trainer has one
// connection, whichever framework uses it) and the completion thread that
// waits for every request and finishes its kernel.
//
// Only libcollective's C ABI is used here: TensorFlow ships its own abseil
// headers, which must not meet the C++ API's (Debian's) in one translation
// unit.
//
// Threads: Attach and Detach run on the Python thread of init() and
// shutdown(); WithCurrent, Submit and Call on TensorFlow's kernel threads
// (and on the completion thread, where TensorFlow starts a kernel from
// `done`); completions and calls run on the session's own completion thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "collective/collective.h"

namespace collective::tensorflow {

// How a request ended: code 0 with the result (a view when the request had
// no output, until the completion returns), or the status code and message
// of the error every rank of the collective received.
struct Completion {
  collective_client_t* client = nullptr;
  collective_handle_t handle = 0;
  int code = 0;
  std::string message;
  const void* view = nullptr;
  size_t bytes = 0;
};

class OpSession {
 public:
  // Takes a borrowed handle (collective_borrow), closed on destruction.
  explicit OpSession(collective_client_t* client);
  // Finishes every request submitted so far, then closes the handle.
  ~OpSession();
  OpSession(const OpSession&) = delete;
  OpSession& operator=(const OpSession&) = delete;

  collective_client_t* client() const { return client_; }

  // Runs `finish` on the completion thread once `handle` has completed,
  // after the requests submitted before it: a TensorFlow graph submits the
  // same collectives on every rank, so each one completes once all ranks
  // submitted it, whatever order this thread waits in. A view result is
  // released after `finish` returns.
  void Submit(collective_handle_t handle, std::function<void(const Completion&)> finish);
  // Runs `call` on the completion thread after the requests submitted
  // before it have finished: the C ABI's blocking collectives (barrier,
  // join), which thus keep their place among the ops and never hold
  // TensorFlow's threads.
  void Call(std::function<void(collective_client_t*)> call);

  // Runs `use` with the session of the current init() and returns true, or
  // returns false before init() and after shutdown(). Attach and Detach wait
  // until no `use` runs, so a submission never meets a closing session.
  static bool WithCurrent(const std::function<void(OpSession&)>& use);
  // Replaces the current session (null: none); the previous one finishes
  // its requests and closes, on the calling thread.
  static void Attach(std::unique_ptr<OpSession> session);

 private:
  // A request to wait for and finish, or a call to make.
  struct Pending {
    collective_handle_t handle = 0;
    std::function<void(const Completion&)> finish;
    std::function<void(collective_client_t*)> call;
  };
  void Push(Pending pending);
  void Run();

  collective_client_t* const client_;
  std::mutex mutex_;
  std::condition_variable pending_added_;
  std::deque<Pending> pending_;  // guarded by mutex_
  bool stopping_ = false;        // guarded by mutex_
  std::thread thread_;
};

}  // namespace collective::tensorflow
