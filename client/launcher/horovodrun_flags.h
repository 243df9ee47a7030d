// horovodrun's tuning flags on collectiverun's command line. horovodrun
// turns them into HOROVOD_* variables for the processes it starts; here they
// become the same variables in the environment of the private collectived,
// which reads them (config/horovod_environment.h), and of the ranks. So a
// launch line written for horovodrun keeps its settings with collectiverun.
#pragma once

#include <map>
#include <string>

namespace CLI {
class App;
}  // namespace CLI

namespace collective::launcher {

// What the flags say, in horovodrun's units; unset fields were not given.
class HorovodrunFlags {
 public:
  // Registers the flags on `app`, in a group of their own.
  void AddTo(CLI::App& app);

  // The HOROVOD_* variables the given flags set, as horovodrun sets them
  // (--fusion-threshold-mb in bytes, switches as "1").
  std::map<std::string, std::string> Variables() const;

 private:
  std::map<std::string, std::string> values_;  // variable -> value as given
};

}  // namespace collective::launcher
