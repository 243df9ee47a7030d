#include "shm/segment_names.h"

#include <algorithm>

#include <dirent.h>
#include <sys/mman.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/logging.h"

namespace collective::shm {
namespace {

// FNV-1a: stable across builds and machines, unlike std::hash.
uint32_t SocketTag(absl::string_view path) {
  uint32_t hash = 2166136261u;
  for (char c : path) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 16777619u;
  }
  return hash;
}

bool IsHex(absl::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return absl::ascii_isxdigit(c); });
}

}  // namespace

SegmentNames::SegmentNames(uid_t daemon_uid, absl::string_view socket_path, uint64_t epoch)
    : prefix_(absl::StrFormat("collectived.%u.%08x.", daemon_uid, SocketTag(socket_path))),
      mark_prefix_(absl::StrFormat("%s%08x.", MarkPrefix(daemon_uid), SocketTag(socket_path))),
      epoch_(absl::StrFormat("%016x", epoch)) {}

std::string SegmentNames::Mark() const { return absl::StrCat(mark_prefix_, epoch_); }

std::string SegmentNames::MarkPrefix(uid_t uid) {
  return absl::StrFormat("collectived.alive.%u.", uid);
}

std::string SegmentNames::SegmentsOfMark(uid_t uid, absl::string_view mark) {
  // "<tag>.<epoch>": 8 and 16 hex digits.
  if (!absl::ConsumePrefix(&mark, MarkPrefix(uid)) || mark.size() != 8 + 1 + 16 || mark[8] != '.' ||
      !IsHex(mark.substr(0, 8)) || !IsHex(mark.substr(9))) {
    return "";
  }
  return absl::StrFormat("collectived.%u.%s.", uid, mark);
}

std::string SegmentNames::Client(uint64_t client_id) const {
  return absl::StrCat(prefix_, epoch_, ".c", client_id);
}

std::string SegmentNames::Result(uint64_t job_sequence) const {
  return absl::StrCat(prefix_, epoch_, ".r", job_sequence);
}

std::string SegmentNames::Doorbell(uint64_t job_sequence) const {
  return absl::StrCat(prefix_, epoch_, ".d", job_sequence);
}

int SegmentNames::Remove(bool keep_ours) const {
  int removed = 0;
  const std::string ours = absl::StrCat(prefix_, epoch_);
  const std::string our_mark = Mark();
  // Both prefixes start so.
  for (const std::string& name : ShmObjectsStartingWith("collectived.")) {
    const bool segment = absl::StartsWith(name, prefix_);
    if (!segment && !absl::StartsWith(name, mark_prefix_)) continue;
    if (keep_ours && absl::StartsWith(name, segment ? ours : our_mark)) continue;
    if (RemoveShmObject(name, "an earlier daemon on this socket")) ++removed;
  }
  return removed;
}

int SegmentNames::RemoveStale() const { return Remove(/*keep_ours=*/true); }

int SegmentNames::RemoveAll() const { return Remove(/*keep_ours=*/false); }

std::vector<std::string> ShmObjectsStartingWith(absl::string_view prefix) {
  std::vector<std::string> names;
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return names;
  while (const dirent* entry = ::readdir(dir)) {
    if (absl::StartsWith(entry->d_name, prefix)) names.emplace_back(entry->d_name);
  }
  ::closedir(dir);
  return names;
}

bool RemoveShmObject(const std::string& name, absl::string_view whose) {
  if (::shm_unlink(absl::StrCat("/", name).c_str()) != 0) return false;
  log::Shm().info("removed '/{}', left by {}", name, whose);
  return true;
}

}  // namespace collective::shm
