// collectiverun: start the ranks of a job on this node, with a private
// collectived unless one is configured. `collectiverun --help` says how.
#include <iostream>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/numbers.h"
#include "client/launcher/check_build.h"
#include "client/launcher/host_agent.h"
#include "client/launcher/launcher.h"
#include "client/launcher/launcher_options.h"
#include "client/launcher/launcher_output.h"
#include "client/launcher/rank_environment.h"

int main(int argc, char** argv) {
  using namespace collective::launcher;
  // What collectiverun starts on another machine of an elastic job
  // (host_agent.h); not for users, so not among the options.
  const std::vector<std::string> args(argv, argv + argc);
  if (args.size() == 3 && args[1] == "--host-agent") return RunHostAgent(args[2]);
  if (args.size() == 3 && args[1] == "--host-cleanup") return RunHostCleanup(args[2]);
  if (args.size() >= 5 && args[1] == "--remote-exec" && args[3] == "--") {
    double grace = 0;
    if (!absl::SimpleAtod(args[2], &grace) || !(grace >= 0)) return 2;
    return RunRemoteExec(grace, {args.begin() + 4, args.end()});
  }
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
