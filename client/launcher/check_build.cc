#include "client/launcher/check_build.h"

#include <set>
#include <string>

#include <poll.h>
#include <unistd.h>

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/launcher/child_process.h"
#include "collective/build_config.h"

namespace collective::launcher {
namespace {

// Imports each module in its own try; prints the names that imported.
constexpr char kProbe[] = R"(
import importlib
for name in ('collective.tensorflow', 'collective.torch'):
    try:
        importlib.import_module(name)
        print(name)
    except Exception:
        pass
)";

// Importing TensorFlow takes seconds; a Python that hangs counts as none.
constexpr absl::Duration kProbeTimeout = absl::Seconds(120);

// The modules python3 imports, by name; empty when there is no python3.
std::set<std::string> ImportableModules(const Environment& environment) {
  auto python = ChildProcess::Spawn({.argv = {"python3", "-c", kProbe},
                                     .environment = ToEnvp(environment),
                                     // One pipe: TensorFlow's import warnings must not fill
                                     // a stderr pipe nobody reads.
                                     .output = SpawnOptions::Output::kOnePipe});
  if (!python.ok()) return {};
  UniqueFd out = python->TakeStdout();
  std::string text;
  const absl::Time deadline = absl::Now() + kProbeTimeout;
  char buffer[4096];
  while (absl::Now() < deadline) {
    pollfd ready = {out.get(), POLLIN, 0};
    const int left = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (::poll(&ready, 1, std::max(left, 0)) <= 0) break;
    const ssize_t got = ::read(out.get(), buffer, sizeof(buffer));
    if (got <= 0) break;
    text.append(buffer, static_cast<size_t>(got));
  }
  // A Python that outlived the deadline is killed by ChildProcess.
  std::set<std::string> modules;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    modules.emplace(line);
  }
  return modules;
}

const char* Mark(bool available) { return available ? "[X]" : "[ ]"; }

}  // namespace

int PrintCheckBuild(std::ostream& out, const Environment& environment) {
  const std::set<std::string> modules = ImportableModules(environment);
  const bool nccl = COLLECTIVE_HAVE_CUDA != 0;  // the GPU path is built with NCCL
  out << "collectived v" << COLLECTIVE_VERSION << ":\n\n"
      << "Available Frameworks:\n"
      << "    " << Mark(modules.count("collective.tensorflow") > 0) << " TensorFlow\n"
      << "    " << Mark(modules.count("collective.torch") > 0) << " PyTorch\n"
      << "    " << Mark(false) << " MXNet\n\n"
      << "Available Controllers:\n"
      << "    " << Mark(true) << " MPI\n"
      << "    " << Mark(false) << " Gloo\n\n"
      << "Available Tensor Operations:\n"
      << "    " << Mark(nccl) << " NCCL\n"
      << "    " << Mark(false) << " DDL\n"
      << "    " << Mark(false) << " CCL\n"
      << "    " << Mark(true) << " MPI\n"
      << "    " << Mark(false) << " Gloo\n";
  return 0;
}

}  // namespace collective::launcher
