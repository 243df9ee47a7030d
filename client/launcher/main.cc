// collectiverun: start the ranks of a job on this node, with a private
// collectived unless one is configured. `collectiverun --help` says how.
#include <iostream>
#include <variant>

#include "client/launcher/check_build.h"
#include "client/launcher/launcher.h"
#include "client/launcher/launcher_options.h"
#include "client/launcher/launcher_output.h"
#include "client/launcher/rank_environment.h"

int main(int argc, char** argv) {
  using namespace collective::launcher;
  auto parsed = ParseLauncherOptions({argv, argv + argc}, std::cout, std::cerr);
  if (const int* exit_code = std::get_if<int>(&parsed)) return *exit_code;
  LauncherOptions& options = std::get<LauncherOptions>(parsed);
  const Environment environment = CurrentEnvironment();
  if (options.check_build) return PrintCheckBuild(std::cout, environment);
  if (absl::Status status = ApplyEnvironment(environment, options); !status.ok()) {
    Say(status.message());
    return 2;
  }
  return RunJob(options, JobEnvironment(options, environment));
}
