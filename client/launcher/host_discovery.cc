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

// Reads the script's stdout and stderr together to their ends (so that a
// script that writes much to one is never blocked on it while the other is
// read), or until `deadline`; false if the deadline came first.
bool ReadBoth(int out_fd, int err_fd, absl::Time deadline, std::string& out, std::string& err) {
  pollfd fds[2] = {{.fd = out_fd, .events = POLLIN, .revents = 0},
                   {.fd = err_fd, .events = POLLIN, .revents = 0}};
  std::string* sinks[2] = {&out, &err};
  char buffer[4096];
  while (fds[0].fd >= 0 || fds[1].fd >= 0) {
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0) return false;
    const int polled = ::poll(fds, 2, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (polled < 0 && errno != EINTR) return false;
    for (int i = 0; i < 2 && polled > 0; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t got = ::read(fds[i].fd, buffer, sizeof(buffer));
      if (got > 0) {
        sinks[i]->append(buffer, static_cast<size_t>(got));
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        fds[i].fd = -1;  // its end (poll skips negative descriptors)
      }
    }
  }
  return true;
}

// Waits for the child's exit until `deadline`; nullopt if it is still running.
std::optional<int> AwaitExit(ChildProcess& child, absl::Time deadline) {
  while (!child.TryReap().has_value()) {
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0) return std::nullopt;
    pollfd exited{.fd = child.pidfd(), .events = POLLIN, .revents = 0};
    ::poll(&exited, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
  }
  return child.status();
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

absl::StatusOr<std::vector<DiscoveredHost>> HostDiscovery::LocalHosts(
    absl::Duration timeout) const {
  auto child = ChildProcess::Spawn({.argv = {script_},
                                    .environment = ToEnvp(environment_),
                                    .output = SpawnOptions::Output::kSeparatePipes});
  if (!child.ok()) {
    return absl::Status(child.status().code(),
                        absl::StrCat("host discovery: ", child.status().message()));
  }
  const absl::Time deadline = absl::Now() + timeout;
  std::string output;
  std::string errors;
  UniqueFd out = child->TakeStdout();
  UniqueFd err = child->TakeStderr();
  const bool read = ReadBoth(out.get(), err.get(), deadline, output, errors);
  const std::optional<int> status = read ? AwaitExit(*child, deadline) : std::nullopt;
  if (!status.has_value()) {
    child->Signal(SIGKILL);
    return absl::DeadlineExceededError(absl::StrCat(
        "the host discovery script ", script_, " ran longer than ", absl::FormatDuration(timeout)));
  }
  if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the host discovery script ", script_, " ", DescribeExit(*status),
                     errors.empty() ? "" : ": ", absl::StripTrailingAsciiWhitespace(errors)));
  }
  auto hosts = ParseDiscoveredHosts(output, default_slots_);
  if (!hosts.ok()) return hosts.status();
  return HostsOfThisMachine(*hosts, "the host discovery script");
}

absl::StatusOr<std::vector<DiscoveredHost>> HostsOfThisMachine(
    const std::vector<DiscoveredHost>& hosts, absl::string_view source) {
  std::vector<DiscoveredHost> merged;
  for (const DiscoveredHost& host : hosts) {
    if (!IsThisMachine(host.name)) {
      return absl::UnimplementedError(absl::StrCat(
          source, " lists host '", host.name,
          "', which is not this machine: collectiverun starts the workers of this machine only "
          "(for several nodes: README, \"Several nodes\")"));
    }
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

int TotalSlots(const std::vector<DiscoveredHost>& hosts) {
  int slots = 0;
  for (const DiscoveredHost& host : hosts) slots += host.slots;
  return slots;
}

absl::StatusOr<int> SlotsOfThisMachine(const std::vector<DiscoveredHost>& hosts,
                                       absl::string_view source) {
  absl::StatusOr<std::vector<DiscoveredHost>> local = HostsOfThisMachine(hosts, source);
  if (!local.ok()) return local.status();
  return TotalSlots(*local);
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
