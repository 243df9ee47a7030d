#include "client/launcher/rendezvous_store.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace collective::launcher {

absl::Status RendezvousStore::Put(absl::string_view scope, absl::string_view key,
                                  std::string value) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto scope_it = scopes_.find(scope);
  const std::string* old = nullptr;
  if (scope_it != scopes_.end()) {
    auto key_it = scope_it->second.find(key);
    if (key_it != scope_it->second.end()) old = &key_it->second;
  }
  const uint64_t freed = old != nullptr ? EntryBytes(scope, key, *old) : 0;
  const uint64_t added = EntryBytes(scope, key, value);
  if (old == nullptr && keys_ >= limits_.max_keys) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the rendezvous holds its limit of ", limits_.max_keys, " keys"));
  }
  if (bytes_ - freed + added > limits_.max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("storing ", added,
                                                     " bytes would pass the rendezvous' limit of ",
                                                     limits_.max_bytes, " bytes"));
  }
  if (old == nullptr) ++keys_;
  bytes_ = bytes_ - freed + added;
  if (scope_it == scopes_.end()) scope_it = scopes_.emplace(std::string(scope), Scope()).first;
  scope_it->second.insert_or_assign(std::string(key), std::move(value));
  return absl::OkStatus();
}

std::optional<std::string> RendezvousStore::Get(absl::string_view scope,
                                                absl::string_view key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto scope_it = scopes_.find(scope);
  if (scope_it == scopes_.end()) return std::nullopt;
  auto key_it = scope_it->second.find(key);
  if (key_it == scope_it->second.end()) return std::nullopt;
  return key_it->second;
}

void RendezvousStore::Delete(absl::string_view scope, absl::string_view key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto size_it = scope_sizes_.find(scope);
  if (size_it != scope_sizes_.end()) {
    // Unlike horovod's server, which counts repeated finalizes and then
    // forgets every scope's finalizes, a rank counts once and only for its
    // own scope. Bounded: a scope's keys can't outgrow max_keys for long,
    // and finalizes are counted only up to the scope's size.
    auto& done = finished_[std::string(scope)];
    if (done.size() < size_it->second) done.emplace(key);
    if (done.size() >= size_it->second) {
      EraseScopeLocked(scope);
      finished_.erase(std::string(scope));
    }
    return;
  }
  auto scope_it = scopes_.find(scope);
  if (scope_it == scopes_.end()) return;
  auto key_it = scope_it->second.find(key);
  if (key_it != scope_it->second.end()) {
    bytes_ -= EntryBytes(scope, key, key_it->second);
    --keys_;
    scope_it->second.erase(key_it);
  }
  if (scope_it->second.empty()) scopes_.erase(scope_it);
}

void RendezvousStore::SetScopeSize(absl::string_view scope, size_t size) {
  std::lock_guard<std::mutex> lock(mutex_);
  scope_sizes_.insert_or_assign(std::string(scope), size);
  finished_.erase(std::string(scope));
}

void RendezvousStore::EraseScopeLocked(absl::string_view scope) {
  auto scope_it = scopes_.find(scope);
  if (scope_it == scopes_.end()) return;
  for (const auto& [key, value] : scope_it->second) {
    bytes_ -= EntryBytes(scope, key, value);
    --keys_;
  }
  scopes_.erase(scope_it);
}

size_t RendezvousStore::key_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return keys_;
}

uint64_t RendezvousStore::byte_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_;
}

}  // namespace collective::launcher
