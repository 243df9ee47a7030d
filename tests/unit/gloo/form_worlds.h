// For the Gloo layer's tests: the daemons of a job as threads of one
// process on 127.0.0.1, forming their worlds through one in-memory store,
// and an allreduce of one int over a Gloo context.
#pragma once

#include <chrono>
#include <csignal>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/context.h>
#include <gloo/rendezvous/store.h>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "daemon/gloo/job_world.h"

namespace collective::daemon::gloo::testing {

// "host-a", "host-b", ...: the host node `node` names itself.
inline std::string HostOf(int node) { return std::string("host-") + static_cast<char>('a' + node); }

inline JobWorldOptions OptionsFor(const std::string& job, uint64_t generation, int node, int nodes,
                                  std::chrono::milliseconds within) {
  JobWorldOptions options;
  options.job_id = job;
  options.generation = generation;
  options.node = node;
  options.nodes = nodes;
  options.host = HostOf(node);
  options.bind_address = "127.0.0.1";
  options.local_size = node + 1;
  options.settings = "fusion_threshold_bytes 67108864";
  options.deadline = Clock::now() + within;
  options.operation_timeout = std::chrono::seconds(20);
  return options;
}

// Forms `options.size()` worlds at once, one thread each; by node.
inline std::vector<absl::StatusOr<std::unique_ptr<JobWorld>>> FormAll(
    ::gloo::rendezvous::Store& store, const std::vector<JobWorldOptions>& options) {
  // Gloo writes to sockets without MSG_NOSIGNAL: a peer gone makes the
  // write fail with EPIPE only where SIGPIPE is ignored, as collectived's
  // main() does.
  std::signal(SIGPIPE, SIG_IGN);
  std::vector<absl::StatusOr<std::unique_ptr<JobWorld>>> worlds(options.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < options.size(); ++i) {
    threads.emplace_back([&, i] { worlds[i] = JobWorld::Form(store, options[i]); });
  }
  for (std::thread& thread : threads) thread.join();
  return worlds;
}

inline std::vector<absl::StatusOr<std::unique_ptr<JobWorld>>> FormJob(
    ::gloo::rendezvous::Store& store, const std::string& job, uint64_t generation, int nodes,
    std::chrono::milliseconds within = std::chrono::seconds(20)) {
  std::vector<JobWorldOptions> options;
  for (int node = 0; node < nodes; ++node) {
    options.push_back(OptionsFor(job, generation, node, nodes, within));
  }
  return FormAll(store, options);
}

// The sum of `value` over the context's ranks (a collective: every rank
// calls it).
inline int SumOver(const std::shared_ptr<::gloo::Context>& context, int value) {
  int result = value;
  ::gloo::AllreduceOptions options(context);
  options.setOutput(&result, 1);
  options.setReduceFunction([](void* c, const void* a, const void* b, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      static_cast<int*>(c)[i] = static_cast<const int*>(a)[i] + static_cast<const int*>(b)[i];
    }
  });
  options.setTimeout(std::chrono::seconds(20));
  ::gloo::allreduce(options);
  return result;
}

}  // namespace collective::daemon::gloo::testing
