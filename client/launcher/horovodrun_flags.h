// horovodrun's tuning flags, and its --config-file, on collectiverun's
// command line. horovodrun turns them into HOROVOD_* variables for the
// processes it starts; here they become the same variables in the
// environment of the private collectived, which reads them
// (config/horovod_environment.h), and of the ranks. So a launch line written
// for horovodrun keeps its settings with collectiverun.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace CLI {
class App;
}  // namespace CLI

namespace collective::launcher {

// What the flags say, in horovodrun's units; unset fields were not given.
class HorovodrunFlags {
 public:
  // Registers the flags on `app`, in a group of their own.
  void AddTo(CLI::App& app);

  // The HOROVOD_* variables the given flags and the config file set, as
  // horovodrun sets them (--fusion-threshold-mb in bytes, switches as "1";
  // a flag over the file's value). INVALID_ARGUMENT when the file cannot be
  // read or holds a value of the wrong kind. Also makes Notes().
  absl::StatusOr<std::map<std::string, std::string>> Variables();

  // After Variables(): one line for each setting given (a flag or the config
  // file's key) that collectived has no use for, saying why, for the
  // launcher to print once. Such settings are still exported, as
  // horovodrun exports them.
  const std::vector<std::string>& Notes() const { return notes_; }

 private:
  std::map<std::string, std::string> values_;  // variable -> value as given
  std::set<std::string> choices_;              // given flags that set no variable (--gloo, ...)
  std::string config_file_;
  bool jsrun_ = false;  // --jsrun: refused by Variables
  std::vector<std::string> notes_;
};

// The variables of a horovodrun config file's YAML (its sections params,
// autotune, timeline, stall_check and logging; the others, and unknown
// keys, are not read, as horovodrun reads only what it knows), values as
// written, before HorovodrunFlags converts units.
absl::StatusOr<std::map<std::string, std::string>> HorovodrunConfigVariables(
    const std::string& yaml);

}  // namespace collective::launcher
