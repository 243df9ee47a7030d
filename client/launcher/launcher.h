// RunJob: one launch, from the daemon to the last rank's exit.
#pragma once

#include "client/launcher/launcher_options.h"
#include "client/launcher/rank_environment.h"

namespace collective::launcher {

// Uses the configured daemon or starts a private one, starts the ranks,
// supervises them, stops the private daemon, and returns the exit code
// (see JobSupervisor::Run; 127 when the command does not exist, 126 when
// it cannot be executed, 1 when the daemon cannot be used).
int RunJob(const LauncherOptions& options, const Environment& environment);

}  // namespace collective::launcher
