// A Gloo rendezvous store over the HTTP key-value protocol of horovodrun's
// rendezvous server (common/rendezvous_protocol.h): the daemons of a job's
// nodes form its Gloo contexts through horovodrun's server or
// collectiverun's, at the address the job's launch environment names.
//
// It owns no connection between calls: each request opens one and closes it
// (horovod's server answers one request per connection), so an HttpStore
// holds only its options and any thread may call it at any time.
//
// Two faces. The absl::Status methods (Set, Get, Wait, Delete) are for our
// code. The gloo::rendezvous::Store overrides are for Gloo, which demands
// exceptions: they throw HttpStoreError, a gloo::IoException that carries
// the same absl::Status; StoreErrorStatus() turns whatever a Gloo call threw
// back into a status.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gloo/common/error.h>
#include <gloo/rendezvous/store.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/clock.h"

namespace collective::daemon::gloo {

struct HttpStoreOptions {
  std::string host;  // a name or an IP literal (IPv6 without brackets)
  uint16_t port = 0;
  std::string scope;   // horovod's context prefix: "global", "local_<host>", ...
  std::string secret;  // sent in kSecretHeader when not empty
  // How long get() and wait(keys) wait for missing keys, and how long set()
  // and Delete() keep retrying an unreachable server: Gloo's default.
  std::chrono::milliseconds timeout = ::gloo::rendezvous::Store::kDefaultTimeout;
  // The longest one HTTP exchange (connect, request, response) may take.
  std::chrono::milliseconds request_timeout = std::chrono::seconds(10);
  // The largest value a GET accepts.
  uint64_t max_value_bytes = uint64_t{64} << 20;
  // When set and true, waits and retries end at once with CANCELLED (the
  // daemon stops while a job's world forms).
  std::shared_ptr<const std::atomic<bool>> cancelled;
};

class HttpStore : public ::gloo::rendezvous::Store {
 public:
  explicit HttpStore(HttpStoreOptions options);

  // "host:port" ("[v6]:port"), as every error names it.
  const std::string& address() const { return address_; }
  const std::string& scope() const { return options_.scope; }

  // PUT: stores `value` under `key`, replacing any value there. Retries an
  // unreachable server until `deadline`.
  absl::Status Set(absl::string_view key, absl::Span<const char> value, Clock::time_point deadline);
  // GET until the key exists: its value, or DEADLINE_EXCEEDED (UNAVAILABLE
  // while the server could not be reached) naming the key and the address.
  absl::StatusOr<std::vector<char>> Get(absl::string_view key, Clock::time_point deadline);
  // One GET: the value, or nullopt while the key is not there.
  absl::StatusOr<std::optional<std::vector<char>>> TryGet(absl::string_view key,
                                                          Clock::time_point deadline);
  // Until every key exists; else as Get, naming the keys still missing.
  absl::Status Wait(const std::vector<std::string>& keys, Clock::time_point deadline);
  // DELETE: horovod's finalize when `key` is this rank's number in a scope
  // of known size, else removes the key.
  absl::Status Delete(absl::string_view key, Clock::time_point deadline);

  // gloo::rendezvous::Store. A zero timeout is gloo::kNoTimeout: no deadline.
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  struct Response {
    unsigned status = 0;
    std::vector<char> body;
  };
  // One exchange, retried on transport errors and transient statuses until
  // `deadline`; UNAVAILABLE naming the address once it passes.
  absl::StatusOr<Response> Request(absl::string_view method, absl::string_view key,
                                   absl::Span<const char> body, Clock::time_point deadline);
  // One exchange on a fresh connection, bounded by `expiry`.
  absl::StatusOr<Response> Exchange(absl::string_view method, const std::string& target,
                                    absl::Span<const char> body, Clock::time_point expiry);
  // Wait, keeping the value of the last key when `last_value` is not null.
  absl::Status Wait(const std::vector<std::string>& keys, Clock::time_point deadline,
                    std::vector<char>* last_value);
  std::string Target(absl::string_view key) const;
  // CANCELLED once options_.cancelled says so.
  absl::Status CheckCancelled() const;
  Clock::time_point DeadlineAfter(std::chrono::milliseconds timeout) const;

  HttpStoreOptions options_;
  std::string address_;
};

// What an HttpStore method threw through Gloo: its absl::Status.
class HttpStoreError : public ::gloo::IoException {
 public:
  explicit HttpStoreError(absl::Status status);
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

// The status behind an exception out of a Gloo call that used an
// HttpStore: HttpStoreError's own, else UNKNOWN with the exception's text.
absl::Status StoreErrorStatus(const std::exception& error);

}  // namespace collective::daemon::gloo
