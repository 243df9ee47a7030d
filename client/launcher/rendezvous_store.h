// The keys and values that collectiverun's rendezvous server holds for the
// jobs it launched (rendezvous_server.h), with horovod's meaning of DELETE
// (common/rendezvous_protocol.h) and bounds on what clients may store.
// Thread-safe: the server's thread serves requests while the launcher's
// thread declares scope sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace collective::launcher {

struct RendezvousLimits {
  size_t max_keys = size_t{1} << 16;
  uint64_t max_bytes = uint64_t{256} << 20;  // scopes, keys and values together
};

class RendezvousStore {
 public:
  explicit RendezvousStore(RendezvousLimits limits) : limits_(limits) {}

  // Stores or replaces; RESOURCE_EXHAUSTED, saying which bound, when the
  // store would pass one (and nothing changes).
  absl::Status Put(absl::string_view scope, absl::string_view key, std::string value);
  std::optional<std::string> Get(absl::string_view scope, absl::string_view key) const;
  // In a scope with a size: `key` (a rank) is done, and when `size` distinct
  // keys are, the scope's keys go. Elsewhere: removes the key.
  void Delete(absl::string_view scope, absl::string_view key);
  // horovod's RendezvousServer.init: the number of ranks that finalize
  // `scope`. Forgets who had finalized it before.
  void SetScopeSize(absl::string_view scope, size_t size);

  size_t key_count() const;
  uint64_t byte_count() const;

 private:
  using Scope = std::map<std::string, std::string, std::less<>>;
  static uint64_t EntryBytes(absl::string_view scope, absl::string_view key,
                             absl::string_view value) {
    return scope.size() + key.size() + value.size();
  }
  void EraseScopeLocked(absl::string_view scope);

  const RendezvousLimits limits_;
  mutable std::mutex mutex_;
  std::map<std::string, Scope, std::less<>> scopes_;
  size_t keys_ = 0;
  uint64_t bytes_ = 0;
  std::map<std::string, size_t, std::less<>> scope_sizes_;
  std::map<std::string, std::set<std::string, std::less<>>, std::less<>> finished_;
};

}  // namespace collective::launcher
