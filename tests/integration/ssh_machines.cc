#include "tests/integration/ssh_machines.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "tests/integration/daemon_process.h"

namespace collective::testing {
namespace {

constexpr char kSshd[] = "/usr/sbin/sshd";
constexpr char kSshKeygen[] = "/usr/bin/ssh-keygen";
constexpr absl::Duration kStartTimeout = absl::Seconds(20);

// A loopback port nobody listens on now (sshd takes it a moment later; a
// start that loses the race is tried again on another).
absl::StatusOr<int> FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
                     ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  ::close(fd);
  if (!bound) return absl::InternalError(absl::StrCat("bind: ", std::strerror(errno)));
  return ntohs(address.sin_port);
}

bool Accepts(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool connected =
      ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0;
  ::close(fd);
  return connected;
}

absl::Status MakeKey(const std::string& path) {
  auto keygen = Subprocess::Start({kSshKeygen, "-q", "-t", "ed25519", "-N", "", "-f", path});
  if (!keygen.ok()) return keygen.status();
  const std::optional<int> status = keygen->Wait(absl::Seconds(30));
  if (!status.has_value() || *status != 0) {
    return absl::InternalError(absl::StrCat("ssh-keygen failed: ", keygen->Stderr()));
  }
  return absl::OkStatus();
}

std::string UserName() {
  const passwd* user = ::getpwuid(::geteuid());
  return user != nullptr ? user->pw_name : "root";
}

}  // namespace

absl::StatusOr<std::unique_ptr<SshMachines>> SshMachines::Start(std::vector<std::string> hosts) {
  if (::access(kSshd, X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(kSshd,
                     " is missing: the tests of jobs across machines need Debian's openssh-server "
                     "(scripts/install-deps.sh installs it)"));
  }
  auto machines = std::unique_ptr<SshMachines>(new SshMachines());
  machines->hosts_ = std::move(hosts);
  machines->directory_ = std::make_unique<TemporaryDirectory>("ssh");
  const std::string dir = machines->directory_->path();
  if (dir.empty()) return absl::InternalError("cannot make a directory for sshd");
  RETURN_IF_ERROR(MakeKey(dir + "/host_key"));
  RETURN_IF_ERROR(MakeKey(dir + "/client_key"));
  std::filesystem::copy_file(dir + "/client_key.pub", dir + "/authorized_keys");
  // sshd run by root separates privileges into this directory, which
  // systemd makes for the system's sshd.
  if (::geteuid() == 0) ::mkdir("/run/sshd", 0755);

  for (int attempt = 0; attempt < 3; ++attempt) {
    ASSIGN_OR_RETURN(const int port, FreePort());
    std::ofstream(dir + "/sshd_config")
        << "Port " << port << "\nListenAddress 127.0.0.1\nHostKey " << dir << "/host_key\n"
        << "AuthorizedKeysFile " << dir << "/authorized_keys\n"
        << "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        << "PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\nPidFile none\n";
    machines->port_ = port;
    machines->key_ = dir + "/client_key";
    const std::string common =
        absl::StrCat("Host ", absl::StrJoin(machines->hosts_, " "),
                     "\n  HostName 127.0.0.1\n  User ", UserName(),
                     "\n  IdentitiesOnly yes\n  StrictHostKeyChecking no\n"
                     "  UserKnownHostsFile /dev/null\n  BatchMode yes\n  LogLevel ERROR\n");
    machines->config_ = dir + "/ssh_config";
    std::ofstream(machines->config_)
        << common << "  Port " << port << "\n  IdentityFile " << machines->key_ << "\n";
    machines->bare_config_ = dir + "/ssh_config_bare";
    std::ofstream(machines->bare_config_) << common;
    // -D: in the foreground, a child of the test; -e: its log on stderr.
    auto sshd = Subprocess::Start({kSshd, "-D", "-e", "-f", dir + "/sshd_config"});
    if (!sshd.ok()) return sshd.status();
    machines->sshd_ = std::make_unique<Subprocess>(std::move(*sshd));
    const absl::Time deadline = absl::Now() + kStartTimeout;
    while (absl::Now() < deadline && !Accepts(port)) {
      if (machines->sshd_->Wait(absl::Milliseconds(20)).has_value()) break;  // exited
    }
    if (Accepts(port)) return machines;
    if (!machines->sshd_->Wait(absl::ZeroDuration()).has_value()) {
      return absl::DeadlineExceededError(
          absl::StrCat("sshd did not listen on port ", port, ": ", machines->sshd_->Stderr()));
    }
  }
  return absl::UnavailableError(absl::StrCat("sshd did not start: ", machines->sshd_->Stderr()));
}

SshMachines::~SshMachines() {
  if (sshd_ != nullptr) {
    sshd_->Signal(SIGTERM);
    sshd_->Wait(absl::Seconds(5));
  }
}

std::map<std::string, std::string> SshMachines::Environment() const {
  return {{"OMPI_MCA_plm_rsh_agent", "ssh -F " + config_}};
}

std::map<std::string, std::string> SshMachines::EnvironmentWithoutPortAndKey() const {
  return {{"OMPI_MCA_plm_rsh_agent", "ssh -F " + bare_config_}};
}

int SshMachines::Logins() const {
  return static_cast<int>(Occurrences(sshd_->Stderr(), "Accepted publickey"));
}

}  // namespace collective::testing
