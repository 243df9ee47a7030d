// HostBlacklist: the hosts an elastic job with a host discovery script
// leaves out, as Horovod's driver blacklists them: the host of a worker that
// failed, or (ours) of a daemon that died. Without a cooldown range a host
// stays out for good. With one (horovodrun's --blacklist-cooldown-range MIN
// MAX, in seconds) it comes back once its cooldown is over, and each time it
// is blacklisted again its cooldown doubles, as in Horovod: MIN * 2^n plus a
// random part of MIN (n: how often it was blacklisted), kept within
// [MIN, MAX]. A host blacklisted again during its cooldown keeps the one it
// has. Only the launcher's thread touches it.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace collective::launcher {

struct CooldownRange {
  int min_seconds = 0;
  int max_seconds = 0;
};

// Horovod's bounds on the range: 1 s to 1 h; INVALID_ARGUMENT with
// Horovod's text otherwise.
absl::Status CheckCooldownRange(const CooldownRange& range);

class HostBlacklist {
 public:
  // `random` draws from [0, 1) (a fixed value in tests).
  explicit HostBlacklist(std::optional<CooldownRange> cooldown = std::nullopt,
                         std::function<double()> random = {});

  // Leaves `host` out from `now` on: until the end of its cooldown, which
  // this returns, or for good (nullopt).
  std::optional<absl::Time> Add(int host, absl::Time now);
  // Whether `host` is out at `now`.
  bool Contains(int host, absl::Time now) const;
  // The hosts whose cooldown ended by `now`: they are no longer out (to be
  // said once).
  std::vector<int> Resurrect(absl::Time now);

  // "for good", or "for 12s".
  static std::string Describe(std::optional<absl::Time> until, absl::Time now);

 private:
  struct Entry {
    int count = 0;                    // times blacklisted
    std::optional<absl::Time> until;  // the cooldown's end; nullopt: for good
    bool out = false;
  };

  const std::optional<CooldownRange> cooldown_;
  std::function<double()> random_;
  std::map<int, Entry> hosts_;
};

}  // namespace collective::launcher
