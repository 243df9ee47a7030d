#include "tests/unit/gloo/local_contexts.h"

#include <csignal>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>

#include "daemon/gloo/gloo_group.h"

namespace collective::daemon::gloo::testing {

std::vector<std::shared_ptr<::gloo::Context>> ConnectLocalContexts(
    int size, std::chrono::milliseconds timeout) {
  // Gloo writes to its sockets without MSG_NOSIGNAL: a write to a node
  // that left would kill the process. The daemon's main ignores SIGPIPE;
  // so does a test that makes nodes leave.
  std::signal(SIGPIPE, SIG_IGN);
  ::gloo::rendezvous::HashStore store;
  std::vector<std::shared_ptr<::gloo::Context>> contexts(static_cast<size_t>(size));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(size));
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < size; ++rank) {
    ranks.emplace_back([&, rank] {
      const auto place = static_cast<size_t>(rank);
      try {
        ::gloo::transport::tcp::attr attr;
        attr.hostname = "127.0.0.1";
        std::shared_ptr<::gloo::transport::Device> device =
            ::gloo::transport::tcp::CreateDevice(attr);
        auto context = std::make_shared<::gloo::rendezvous::Context>(rank, size);
        context->setTimeout(timeout);
        context->connectFullMesh(store, device);
        contexts[place] = std::move(context);
      } catch (...) {
        errors[place] = std::current_exception();
      }
    });
  }
  for (std::thread& rank : ranks) rank.join();
  for (const std::exception_ptr& error : errors) {
    if (error != nullptr) std::rethrow_exception(error);
  }
  return contexts;
}

job::SetSpan SpanOf(std::shared_ptr<::gloo::Context> context, std::vector<int32_t> nodes) {
  job::SetSpan span;
  span.index = context->rank;
  span.nodes = std::move(nodes);
  for (size_t place = 0; place < span.nodes.size(); ++place) {
    span.first.push_back(static_cast<int32_t>(place));
    span.count.push_back(1);
  }
  span.group = std::make_shared<GlooGroup>(std::move(context));
  return span;
}

}  // namespace collective::daemon::gloo::testing
