// collectiverun's rendezvous server: the HTTP key-value protocol of
// horovodrun's (common/rendezvous_protocol.h), through which the daemons of
// the nodes a job runs on form its Gloo contexts. Owns a thread of its own
// that accepts and serves every connection (Boost.Beast over Boost.Asio);
// the store behind it (rendezvous_store.h) is the only state that thread
// shares. Start() returns it serving; destruction stops the thread and
// closes every connection.
//
// Anyone who can reach the port may talk to it, so it trusts nothing: a
// request's header and body are bounded, and so are the keys and bytes
// stored and the connections held; malformed HTTP is answered 400, methods
// other than GET/PUT/DELETE 405, a body over the bound 413, a header over it
// 431, a full store 507, a request without the job's secret (when it has
// one) 403 — each then closes the connection. A connection that does not
// bring a whole request within the idle timeout is closed without an answer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/launcher/rendezvous_store.h"

namespace collective::launcher {

struct RendezvousServerOptions {
  std::string address = "0.0.0.0";  // an IP literal to bind
  uint16_t port = 0;                // 0: any free port (port() says which)
  std::string secret;               // when not empty, every request must carry it
  size_t max_header_bytes = 8 << 10;
  size_t max_body_bytes = 16 << 20;  // one value
  RendezvousLimits store;
  size_t max_connections = 256;
  // From accepting a connection, or answering on it, to a whole request in.
  absl::Duration idle_timeout = absl::Seconds(10);
};

class RendezvousServer {
 public:
  // Binds and starts serving; INVALID_ARGUMENT for an address that is not
  // an IP literal, UNAVAILABLE naming the address when it cannot bind.
  static absl::StatusOr<std::unique_ptr<RendezvousServer>> Start(RendezvousServerOptions options);
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  uint16_t port() const;
  // The store the requests read and write; thread-safe.
  RendezvousStore& store();

  class Impl;

 private:
  explicit RendezvousServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace collective::launcher
