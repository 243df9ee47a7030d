// collectived: parse flags, load the configuration, start the daemon, and
// shut it down on SIGTERM or SIGINT, or when it asks to stop (its MPI world
// of daemons broke: exit code 3).
#include <cstdio>
#include <iostream>

#include <signal.h>

#include <CLI/CLI.hpp>

#include "collective/build_config.h"
#include "common/logging.h"
#include "config/config_loader.h"
#include "daemon/daemon.h"
#include "daemon/observe/journal_stream.h"
#include "daemon/stop_signal.h"

int main(int argc, char** argv) {
  // Before any thread starts: signals are taken synchronously.
  auto stop = collective::daemon::StopSignal::Create();
  if (!stop.ok()) {
    std::fprintf(stderr, "collectived: %s\n", std::string(stop.status().message()).c_str());
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);

  CLI::App app{"collectived: the per-node collective communication daemon"};
  app.set_version_flag("--version", COLLECTIVE_VERSION);
  collective::config::ConfigLoader loader(app);
  CLI11_PARSE(app, argc, argv);

  auto config = loader.Load(collective::config::ProcessEnvironment());
  if (!config.ok()) {
    std::fprintf(stderr, "collectived: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  if (loader.print_config_requested()) {
    std::cout << collective::config::FormatEffectiveConfig(*config);
    return 0;
  }
  const auto& values = config->values;
  collective::log::Configure(
      *collective::log::ParseLevelSpec(values.log_level),
      values.log_format == collective::config::LogFormat::kJson ? collective::log::Format::kJson
                                                                : collective::log::Format::kText,
      collective::daemon::observe::UsePriorityPrefix(values.log_priority_prefix));

  collective::daemon::StopSignal& signal = **stop;
  auto daemon =
      collective::daemon::Daemon::Start(values, [&signal](std::string reason, int exit_code) {
        signal.Request(std::move(reason), exit_code);
      });
  if (!daemon.ok()) {
    collective::log::Daemon().critical("cannot start: {}", daemon.status().message());
    return 1;
  }
  const collective::daemon::StopSignal::Reason reason = signal.Wait();
  (*daemon)->Shutdown(reason.text, reason.world_lost);
  return reason.exit_code;
}
