#include "tests/common/subprocess.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace collective::testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

std::string TempPath(absl::string_view what) {
  static int counter = 0;
  return absl::StrCat(std::filesystem::temp_directory_path().string(), "/collective-test-",
                      ::getpid(), "-", counter++, "-", what);
}

}  // namespace

absl::StatusOr<Subprocess> Subprocess::Start(
    const std::vector<std::string>& argv, const std::map<std::string, std::string>& environment) {
  Subprocess process;
  process.stdout_path_ = TempPath("stdout");
  process.stderr_path_ = TempPath("stderr");

  std::map<std::string, std::string> merged;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const char* equals = std::strchr(*entry, '=');
    if (equals != nullptr)
      merged[std::string(*entry, static_cast<size_t>(equals - *entry))] = equals + 1;
  }
  for (const auto& [key, value] : environment) merged[key] = value;
  std::vector<std::string> env_strings;
  for (const auto& [key, value] : merged) env_strings.push_back(key + "=" + value);
  std::vector<char*> envp;
  for (auto& entry : env_strings) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> arg_pointers;
  for (auto& arg : args) arg_pointers.push_back(arg.data());
  arg_pointers.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, process.stdout_path_.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, 2, process.stderr_path_.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  const int error = posix_spawn(&process.pid_, args[0].c_str(), &actions, nullptr,
                                arg_pointers.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    return absl::InternalError(absl::StrCat("cannot start ", args[0], ": ", std::strerror(error)));
  }
  process.pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, process.pid_, 0));
  if (process.pidfd_ < 0) {
    return absl::InternalError(absl::StrCat("pidfd_open: ", std::strerror(errno)));
  }
  return process;
}

Subprocess::Subprocess(Subprocess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      pidfd_(std::exchange(other.pidfd_, -1)),
      status_(other.status_),
      stdout_path_(std::move(other.stdout_path_)),
      stderr_path_(std::move(other.stderr_path_)) {}

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    Close();
    pid_ = std::exchange(other.pid_, -1);
    pidfd_ = std::exchange(other.pidfd_, -1);
    status_ = other.status_;
    stdout_path_ = std::move(other.stdout_path_);
    stderr_path_ = std::move(other.stderr_path_);
  }
  return *this;
}

Subprocess::~Subprocess() { Close(); }

void Subprocess::Close() {
  if (pid_ > 0 && !status_.has_value()) {
    ::kill(pid_, SIGKILL);
    Wait(absl::Seconds(10));
  }
  if (pidfd_ >= 0) ::close(pidfd_);
  pidfd_ = -1;
  if (!stdout_path_.empty()) ::unlink(stdout_path_.c_str());
  if (!stderr_path_.empty()) ::unlink(stderr_path_.c_str());
  pid_ = -1;
}

std::optional<int> Subprocess::Wait(absl::Duration timeout) {
  if (status_.has_value()) return status_;
  pollfd fd{pidfd_, POLLIN, 0};
  const int millis = static_cast<int>(absl::ToInt64Milliseconds(timeout));
  int ready;
  do {
    ready = ::poll(&fd, 1, millis);
  } while (ready < 0 && errno == EINTR);
  if (ready <= 0) return std::nullopt;
  int status = 0;
  if (::waitpid(pid_, &status, 0) == pid_) status_ = status;
  return status_;
}

void Subprocess::Signal(int signal) const {
  if (pid_ > 0 && !status_.has_value()) ::kill(pid_, signal);
}

std::string Subprocess::Stdout() const { return ReadFile(stdout_path_); }
std::string Subprocess::Stderr() const { return ReadFile(stderr_path_); }

std::string Subprocess::Describe(int status) const {
  const std::string how = WIFEXITED(status)     ? absl::StrCat("exit ", WEXITSTATUS(status))
                          : WIFSIGNALED(status) ? absl::StrCat("signal ", WTERMSIG(status))
                                                : absl::StrCat("status ", status);
  return absl::StrCat("pid ", pid_, ": ", how, "; stderr:\n", Stderr());
}

bool ExitedCleanly(std::optional<int> status) {
  return status.has_value() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
}

std::string ExecutableDirectory() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path().string();
}

}  // namespace collective::testing
