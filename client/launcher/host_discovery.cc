#include "client/launcher/host_discovery.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "client/launcher/child_process.h"

namespace collective::launcher {
namespace {

std::string HostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

}  // namespace

absl::StatusOr<std::vector<DiscoveredHost>> ParseDiscoveredHosts(absl::string_view output,
                                                                 int default_slots) {
  std::vector<DiscoveredHost> hosts;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    DiscoveredHost host{.name = std::string(line), .slots = default_slots};
    // The last colon: "::1:4" is host ::1 with 4 slots; "::1" alone has none.
    const size_t colon = line.rfind(':');
    if (colon != absl::string_view::npos && line.find(':') == colon) {
      host.name = std::string(line.substr(0, colon));
      if (!absl::SimpleAtoi(line.substr(colon + 1), &host.slots) || host.slots < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("the host discovery script printed '", line,
                         "': a line is 'host' or 'host:slots', with slots a positive number"));
      }
    }
    if (host.name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the host discovery script printed '", line, "', which names no host"));
    }
    hosts.push_back(std::move(host));
  }
  return hosts;
}

bool IsThisMachine(absl::string_view host) {
  const std::string name = absl::AsciiStrToLower(host);
  if (name == "localhost" || name == "::1" || name == "ip6-localhost") return true;
  if (name.rfind("127.", 0) == 0) return true;
  const std::string own = absl::AsciiStrToLower(HostName());
  if (own.empty()) return false;
  // This machine's name, with or without its domain.
  return name == own || name.substr(0, name.find('.')) == own.substr(0, own.find('.'));
}

absl::StatusOr<std::unique_ptr<DiscoveryRun>> HostDiscovery::Begin(absl::Duration timeout) const {
  if (fixed_.has_value()) return absl::FailedPreconditionError("fixed hosts run no script");
  auto child = ChildProcess::Spawn({.argv = {script_},
                                    .environment = ToEnvp(environment_),
                                    .output = SpawnOptions::Output::kSeparatePipes});
  if (!child.ok()) {
    return absl::Status(child.status().code(),
                        absl::StrCat("host discovery: ", child.status().message()));
  }
  return std::unique_ptr<DiscoveryRun>(
      new DiscoveryRun(std::move(*child), script_, default_slots_, timeout, other_machines_));
}

absl::StatusOr<std::vector<DiscoveredHost>> HostDiscovery::ListHosts(absl::Duration timeout) const {
  if (fixed_.has_value()) return *fixed_;
  absl::StatusOr<std::unique_ptr<DiscoveryRun>> run = Begin(timeout);
  if (!run.ok()) return run.status();
  while (!(*run)->done()) {
    PollSet set;
    (*run)->Watch(set);
    if (!set.Wait((*run)->deadline())) break;
  }
  return (*run)->Finish();
}

DiscoveryRun::DiscoveryRun(ChildProcess child, std::string script, int default_slots,
                           absl::Duration timeout, bool other_machines)
    : child_(std::move(child)),
      out_(child_.TakeStdout()),
      err_(child_.TakeStderr()),
      script_(std::move(script)),
      default_slots_(default_slots),
      timeout_(timeout),
      deadline_(absl::Now() + timeout),
      other_machines_(other_machines) {}

void DiscoveryRun::Pump(UniqueFd& fd, std::string& sink) {
  char buffer[4096];
  const ssize_t got = ::read(fd.get(), buffer, sizeof(buffer));
  if (got > 0) {
    sink.append(buffer, static_cast<size_t>(got));
  } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
    fd.Reset();  // its end
  }
}

void DiscoveryRun::Watch(PollSet& set) {
  if (out_.valid()) set.Add(out_.get(), [this] { Pump(out_, output_); });
  if (err_.valid()) set.Add(err_.get(), [this] { Pump(err_, errors_); });
  if (!child_.reaped()) set.Add(child_.pidfd(), [this] { child_.TryReap(); });
}

absl::StatusOr<std::vector<DiscoveredHost>> DiscoveryRun::Finish() {
  if (!done()) {
    child_.Signal(SIGKILL);
    return absl::DeadlineExceededError(absl::StrCat("the host discovery script ", script_,
                                                    " ran longer than ",
                                                    absl::FormatDuration(timeout_)));
  }
  const int status = *child_.status();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the host discovery script ", script_, " ", DescribeExit(status),
                     errors_.empty() ? "" : ": ", absl::StripTrailingAsciiWhitespace(errors_)));
  }
  auto hosts = ParseDiscoveredHosts(output_, default_slots_);
  if (!hosts.ok()) return hosts.status();
  if (other_machines_) return MergeHosts(*hosts);
  return HostsOfThisMachine(*hosts, "the host discovery script");
}

std::vector<DiscoveredHost> MergeHosts(const std::vector<DiscoveredHost>& hosts) {
  std::vector<DiscoveredHost> merged;
  for (const DiscoveredHost& host : hosts) {
    const auto same = std::find_if(merged.begin(), merged.end(),
                                   [&](const DiscoveredHost& m) { return m.name == host.name; });
    if (same == merged.end()) {
      merged.push_back(host);
    } else {
      same->slots += host.slots;
    }
  }
  return merged;
}

absl::StatusOr<std::vector<DiscoveredHost>> HostsOfThisMachine(
    const std::vector<DiscoveredHost>& hosts, absl::string_view source) {
  for (const DiscoveredHost& host : hosts) {
    if (!IsThisMachine(host.name)) {
      return absl::UnimplementedError(
          absl::StrCat(source, " lists host '", host.name,
                       "', which is not this machine: a job on a configured daemon (--socket, "
                       "COLLECTIVE_SOCKET) runs on this machine's hosts only"));
    }
  }
  return MergeHosts(hosts);
}

int TotalSlots(const std::vector<DiscoveredHost>& hosts) {
  int slots = 0;
  for (const DiscoveredHost& host : hosts) slots += host.slots;
  return slots;
}

absl::StatusOr<std::vector<DiscoveredHost>> ParseHostsOption(absl::string_view list) {
  std::string lines = absl::StrReplaceAll(list, {{",", "\n"}});
  auto hosts = ParseDiscoveredHosts(lines, 1);
  if (!hosts.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "-H '", list, "': each host is 'host' or 'host:slots', with slots a positive number"));
  }
  return hosts;
}

absl::StatusOr<std::vector<DiscoveredHost>> ParseHostfile(absl::string_view text) {
  std::vector<DiscoveredHost> hosts;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    DiscoveredHost host{.name = std::string(fields[0]), .slots = 1};
    bool valid = fields.size() <= 2;
    if (valid && fields.size() == 2) {
      valid = absl::ConsumePrefix(&fields[1], "slots=") &&
              absl::SimpleAtoi(fields[1], &host.slots) && host.slots > 0;
    }
    if (!valid) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hostfile line '", line, "': a line is '<hostname> slots=<slots>' or '<hostname>'"));
    }
    hosts.push_back(std::move(host));
  }
  return hosts;
}

}  // namespace collective::launcher
