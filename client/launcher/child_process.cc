#include "client/launcher/child_process.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace collective::launcher {
namespace {

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// Makes `fd` the child's descriptor `target`, open across exec.
bool MoveTo(int fd, int target) {
  if (fd == target) return ::fcntl(fd, F_SETFD, 0) == 0;
  return ::dup2(fd, target) == target;
}

// Runs in the child between fork and exec: async-signal-safe calls only.
[[noreturn]] void ExecChild(pid_t launcher, char** argv, char** envp, int in, int out, int err,
                            int report) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  // The launcher may have died before the line above took effect.
  if (::getppid() != launcher) ::_exit(127);
  // The launcher blocks the signals it forwards and ignores SIGPIPE; both
  // would otherwise carry over into the child's program.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  ::sigaction(SIGPIPE, &default_action, nullptr);
  int error = 0;
  if (!MoveTo(in, STDIN_FILENO) || (out >= 0 && !MoveTo(out, STDOUT_FILENO)) ||
      (err >= 0 && !MoveTo(err, STDERR_FILENO))) {
    error = errno;
  } else {
    ::execvpe(argv[0], argv, envp);
    error = errno;
  }
  ssize_t ignored = ::write(report, &error, sizeof(error));
  (void)ignored;
  ::_exit(127);
}

absl::Status MakePipe(UniqueFd& read_end, UniqueFd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  read_end.Reset(fds[0]);
  write_end.Reset(fds[1]);
  return absl::OkStatus();
}

absl::Status StartError(const std::string& program, int error) {
  const std::string message = absl::StrCat("cannot start '", program, "': ", std::strerror(error));
  if (error == ENOENT) return absl::NotFoundError(message);
  if (error == EACCES || error == ENOEXEC || error == EISDIR) {
    return absl::PermissionDeniedError(message);
  }
  return absl::InternalError(message);
}

}  // namespace

absl::StatusOr<ChildProcess> ChildProcess::Spawn(const SpawnOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) {
    return absl::InvalidArgumentError("no program to start");
  }
  // Everything the child needs exists before fork.
  std::vector<std::string> args = options.argv;
  std::vector<std::string> environment = options.environment;
  std::vector<char*> argv = Pointers(args);
  std::vector<char*> envp = Pointers(environment);
  UniqueFd input(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!input.valid()) {
    return absl::InternalError(absl::StrCat("/dev/null: ", std::strerror(errno)));
  }
  ChildProcess child;
  UniqueFd out_write, err_write, report_read, report_write;
  if (options.input_pipe) {
    if (absl::Status s = MakePipe(input, child.stdin_); !s.ok()) return s;
  }
  if (options.output != SpawnOptions::Output::kInherit) {
    if (absl::Status s = MakePipe(child.stdout_, out_write); !s.ok()) return s;
  }
  if (options.output == SpawnOptions::Output::kSeparatePipes) {
    if (absl::Status s = MakePipe(child.stderr_, err_write); !s.ok()) return s;
  }
  if (absl::Status s = MakePipe(report_read, report_write); !s.ok()) return s;
  const int err_fd =
      options.output == SpawnOptions::Output::kOnePipe ? out_write.get() : err_write.get();

  const pid_t launcher = ::getpid();
  child.pid_ = ::fork();
  if (child.pid_ < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (child.pid_ == 0) {
    ExecChild(launcher, argv.data(), envp.data(), input.get(), out_write.get(), err_fd,
              report_write.get());
  }
  input.Reset();
  out_write.Reset();
  err_write.Reset();
  report_write.Reset();

  // End of file: the exec succeeded and closed the pipe. An int: why not.
  int error = 0;
  ssize_t got;
  do {
    got = ::read(report_read.get(), &error, sizeof(error));
  } while (got < 0 && errno == EINTR);
  if (got == static_cast<ssize_t>(sizeof(error))) {
    int status = 0;
    ::waitpid(child.pid_, &status, 0);
    child.status_ = status;
    return StartError(options.argv[0], error);
  }
  child.pidfd_.Reset(static_cast<int>(::syscall(SYS_pidfd_open, child.pid_, 0)));
  if (!child.pidfd_.valid()) {
    return absl::InternalError(absl::StrCat("pidfd_open: ", std::strerror(errno)));
  }
  return child;
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      pidfd_(std::move(other.pidfd_)),
      stdin_(std::move(other.stdin_)),
      stdout_(std::move(other.stdout_)),
      stderr_(std::move(other.stderr_)),
      status_(std::exchange(other.status_, std::nullopt)) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    KillAndReap();
    pid_ = std::exchange(other.pid_, -1);
    pidfd_ = std::move(other.pidfd_);
    stdin_ = std::move(other.stdin_);
    stdout_ = std::move(other.stdout_);
    stderr_ = std::move(other.stderr_);
    status_ = std::exchange(other.status_, std::nullopt);
  }
  return *this;
}

ChildProcess::~ChildProcess() { KillAndReap(); }

void ChildProcess::KillAndReap() {
  if (pid_ <= 0 || status_.has_value()) return;
  Signal(SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  status_ = status;
}

void ChildProcess::Signal(int signal) const {
  if (pid_ > 0 && !status_.has_value()) ::kill(-pid_, signal);
}

void ChildProcess::SignalChildOnly(int signal) const {
  if (pid_ > 0 && !status_.has_value()) ::kill(pid_, signal);
}

std::optional<int> ChildProcess::TryReap() {
  if (status_.has_value() || pid_ <= 0) return status_;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    status_ = status;
    stdin_.Reset();
  }
  return status_;
}

std::string SignalName(int signal) {
  const char* name = ::sigabbrev_np(signal);
  return name != nullptr ? absl::StrCat("SIG", name) : absl::StrCat("signal ", signal);
}

std::string DescribeExit(int wait_status) {
  if (WIFEXITED(wait_status)) return absl::StrCat("exited with code ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int signal = WTERMSIG(wait_status);
    return absl::StrCat("was killed by signal ", signal, " (", SignalName(signal), ")");
  }
  return absl::StrCat("ended with wait status ", wait_status);
}

int ShellExitCode(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

}  // namespace collective::launcher
