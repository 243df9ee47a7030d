// collectived: parse flags, load the configuration, start the daemon, and
// shut it down on SIGTERM or SIGINT.
#include <cstdio>
#include <cstring>
#include <iostream>

#include <signal.h>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "collective/build_config.h"
#include "common/logging.h"
#include "config/config_loader.h"
#include "daemon/daemon.h"

int main(int argc, char** argv) {
  // Signals are taken synchronously below (sigwait), so shutdown runs as
  // ordinary code on this thread; block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
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
  collective::log::Configure(*collective::log::ParseLevelSpec(values.log_level),
                             values.log_format == collective::config::LogFormat::kJson
                                 ? collective::log::Format::kJson
                                 : collective::log::Format::kText);

  auto daemon = collective::daemon::Daemon::Start(values);
  if (!daemon.ok()) {
    collective::log::Daemon().critical("cannot start: {}", daemon.status().message());
    return 1;
  }
  int received = 0;
  sigwait(&signals, &received);
  const char* name = sigabbrev_np(received);
  (*daemon)->Shutdown(absl::StrCat("received SIG", name != nullptr ? name : "?"));
  return 0;
}
