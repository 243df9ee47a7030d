#include "tests/integration/daemon_process.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "collective/v1/collective.grpc.pb.h"
#include "shm/segment_names.h"

namespace collective::testing {
namespace {

constexpr absl::Duration kStartTimeout = absl::Seconds(20);

std::unique_ptr<v1::CollectiveService::Stub> Stub(const std::string& socket) {
  // Start() connects before the daemon has bound its socket; with gRPC's
  // default backoff (1 s) every test would wait that long for a daemon that
  // is up in milliseconds.
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 10);
  arguments.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 10);
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 100);
  return v1::CollectiveService::NewStub(
      grpc::CreateCustomChannel("unix:" + socket, grpc::InsecureChannelCredentials(), arguments));
}

}  // namespace

std::string BuiltBinary(const std::string& built) {
  const char* bundle = std::getenv("COLLECTIVE_BUNDLE_DIR");
  if (bundle == nullptr || *bundle == '\0') return built;
  return (std::filesystem::path(bundle) / "bin" / std::filesystem::path(built).filename()).string();
}

std::string CollectivedBinary() { return BuiltBinary(COLLECTIVED_BINARY); }
std::string CollectivectlBinary() { return BuiltBinary(COLLECTIVECTL_BINARY); }
std::string TestWorkerBinary() { return BuiltBinary(TEST_WORKER_BINARY); }

absl::StatusOr<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(Options options) {
  auto daemon = std::unique_ptr<DaemonProcess>(new DaemonProcess());
  if (options.socket.empty()) {
    // Short paths: sun_path holds 108 bytes.
    char pattern[] = "/tmp/cld-XXXXXX";
    if (::mkdtemp(pattern) == nullptr) return absl::InternalError("mkdtemp failed");
    daemon->directory_ = pattern;
    daemon->own_directory_ = true;
    ::chmod(pattern, static_cast<mode_t>(options.directory_mode));
    daemon->socket_ = daemon->directory_ + "/collectived.sock";
  } else {
    daemon->socket_ = options.socket;
    daemon->directory_ = std::filesystem::path(options.socket).parent_path().string();
  }
  std::vector<std::string> argv = {CollectivedBinary(), "--socket", daemon->socket_};
  argv.insert(argv.end(), options.flags.begin(), options.flags.end());
  auto process = Subprocess::Start(argv, options.environment);
  if (!process.ok()) return process.status();
  daemon->process_ = std::make_unique<Subprocess>(std::move(*process));

  // gRPC retries the connection until the socket exists, up to the deadline.
  grpc::ClientContext context;
  context.set_wait_for_ready(true);
  context.set_deadline(absl::ToChronoTime(absl::Now() + kStartTimeout));
  v1::HealthResponse health;
  const grpc::Status status = Stub(daemon->socket_)->Health(&context, {}, &health);
  if (!status.ok() || !health.serving()) {
    const auto exited = daemon->process_->Wait(absl::ZeroDuration());
    return absl::UnavailableError(
        absl::StrCat("collectived did not come up: ", status.error_message(),
                     exited ? absl::StrCat("; it exited: ", daemon->process_->Describe(*exited))
                            : absl::StrCat("; stderr: ", daemon->process_->Stderr())));
  }
  return daemon;
}

DaemonProcess::~DaemonProcess() {
  if (process_) Stop();
  RemoveSegmentsOf(socket_);
  if (own_directory_) {
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
  }
}

std::optional<int> DaemonProcess::Stop() {
  process_->Signal(SIGTERM);
  return process_->Wait(absl::Seconds(20));
}

absl::StatusOr<v1::StatusResponse> DaemonProcess::Status() const { return QueryStatus(socket_); }

absl::StatusOr<v1::StatusResponse> QueryStatus(const std::string& socket) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  v1::StatusResponse response;
  const grpc::Status status = Stub(socket)->Status(&context, {}, &response);
  if (!status.ok()) return absl::UnavailableError(status.error_message());
  return response;
}

absl::Status AwaitHealthy(const std::string& socket, absl::Duration timeout) {
  grpc::ClientContext context;
  context.set_wait_for_ready(true);
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::HealthResponse health;
  const grpc::Status status = Stub(socket)->Health(&context, {}, &health);
  if (!status.ok()) return absl::UnavailableError(status.error_message());
  if (!health.serving()) return absl::UnavailableError("the daemon is shutting down");
  return absl::OkStatus();
}

std::vector<std::string> SegmentsOf(const std::string& socket) {
  // The epoch is not known here; the prefix (uid and socket) is enough.
  const std::string prefix = shm::SegmentNames(::geteuid(), socket, 0).prefix();
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0) found.push_back(name);
  }
  return found;
}

void RemoveSegmentsOf(const std::string& socket) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (socket.size() >= sizeof(address.sun_path)) return;
  socket.copy(address.sun_path, socket.size());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  const bool listening =
      ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0;
  ::close(fd);
  if (!listening) shm::SegmentNames(::geteuid(), socket, 0).RemoveAll();
}

int64_t ResidentKib(pid_t pid) {
  std::ifstream file(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(file, line)) {
    if (!absl::StartsWith(line, "VmRSS:")) continue;
    int64_t kib = 0;
    // "VmRSS:\t   1234 kB"
    const std::vector<std::string> words =
        absl::StrSplit(line.substr(6), absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (!words.empty() && absl::SimpleAtoi(words[0], &kib)) return kib;
  }
  return -1;
}

size_t OpenDescriptors(pid_t pid) {
  size_t count = 0;
  for ([[maybe_unused]] const auto& entry :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/fd"))) {
    ++count;
  }
  return count;
}

std::vector<std::string> DaemonProcess::Segments() const { return SegmentsOf(socket_); }

absl::StatusOr<std::vector<Subprocess>> DaemonProcess::StartWorkers(
    const std::string& worker, int local_size, const std::vector<std::string>& args,
    const std::map<std::string, std::string>& environment) const {
  std::vector<Subprocess> workers;
  for (int rank = 0; rank < local_size; ++rank) {
    std::map<std::string, std::string> env = environment;
    env["COLLECTIVE_SOCKET"] = socket_;
    env["LOCAL_RANK"] = std::to_string(rank);
    env["LOCAL_SIZE"] = std::to_string(local_size);
    std::vector<std::string> argv = {worker};
    argv.insert(argv.end(), args.begin(), args.end());
    auto process = Subprocess::Start(argv, env);
    if (!process.ok()) return process.status();
    workers.push_back(std::move(*process));
  }
  return workers;
}

absl::StatusOr<Subprocess> DaemonProcess::StartWorker(
    const std::string& worker, int local_rank, int local_size, const std::vector<std::string>& args,
    const std::map<std::string, std::string>& environment) const {
  std::map<std::string, std::string> env = environment;
  env["COLLECTIVE_SOCKET"] = socket_;
  env["LOCAL_RANK"] = std::to_string(local_rank);
  env["LOCAL_SIZE"] = std::to_string(local_size);
  std::vector<std::string> argv = {worker};
  argv.insert(argv.end(), args.begin(), args.end());
  return Subprocess::Start(argv, env);
}

bool HasPending(const v1::StatusResponse& status, const std::string& name, int ready_ranks) {
  for (const v1::PendingTensor& tensor : status.pending()) {
    if (tensor.name() == name && tensor.ready_ranks_size() == ready_ranks) return true;
  }
  return false;
}

size_t Occurrences(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++count;
  }
  return count;
}

std::vector<std::string> SmallMemoryFlags() {
  return {"--default-arena-bytes",    "1MiB", "--result-arena-bytes", "4MiB",
          "--fusion-threshold-bytes", "1MiB"};
}

absl::StatusOr<StuckJob> StartStuckJob(const DaemonProcess& daemon) {
  auto victim = daemon.StartWorker(TestWorkerBinary(), 1, 2, {"victim"});
  if (!victim.ok()) return victim.status();
  auto waiter =
      daemon.StartWorker(TestWorkerBinary(), 0, 2, {"wait-stuck", "--expect", "disconnected"});
  if (!waiter.ok()) return waiter.status();
  return StuckJob{std::move(*victim), std::move(*waiter)};
}

bool StuckJobBlocked(const v1::StatusResponse& status) {
  return HasPending(status, "stuck", 1) && HasPending(status, "victim", 1);
}

std::string EndStuckJob(StuckJob& job, const DaemonProcess& daemon, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  job.victim.Signal(SIGKILL);
  const auto waited = job.waiter.Wait(timeout);
  if (!ExitedCleanly(waited)) {
    return absl::StrCat("rank 0: ", waited ? job.waiter.Describe(*waited) : "still runs");
  }
  auto idle = daemon.AwaitStatus(
      [](const v1::StatusResponse& s) { return s.job().state() == v1::JOB_STATE_IDLE; },
      std::max(deadline - absl::Now(), absl::ZeroDuration()));
  return idle.ok() ? "" : std::string(idle.status().message());
}

CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::map<std::string, std::string>& environment,
                         absl::Duration timeout) {
  CommandResult run;
  auto process = Subprocess::Start(argv, environment);
  if (!process.ok()) {
    run.err = process.status().ToString();
    return run;
  }
  const auto status = process->Wait(timeout);
  if (status.has_value() && WIFEXITED(*status)) run.exit_code = WEXITSTATUS(*status);
  run.out = process->Stdout();
  run.err = process->Stderr();
  return run;
}

CommandResult RunCollectivectl(const std::string& socket, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {CollectivectlBinary(), "--socket", socket};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv);
}

std::string WaitForWorkers(std::vector<Subprocess>& workers, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::string failures;
  for (size_t rank = 0; rank < workers.size(); ++rank) {
    const auto status = workers[rank].Wait(std::max(deadline - absl::Now(), absl::ZeroDuration()));
    if (!status.has_value()) {
      absl::StrAppend(&failures, "worker ", rank, " (pid ", workers[rank].pid(),
                      ") still runs after ", absl::FormatDuration(timeout), "; stderr:\n",
                      workers[rank].Stderr(), "\n");
    } else if (!ExitedCleanly(status)) {
      // The end of its stdout too: pytest reports its failures there.
      const std::string out = workers[rank].Stdout();
      constexpr size_t kTail = 4000;
      absl::StrAppend(&failures, "worker ", rank, ": ", workers[rank].Describe(*status),
                      "\nstdout (end):\n",
                      out.size() > kTail ? out.substr(out.size() - kTail) : out, "\n");
    }
  }
  return failures;
}

}  // namespace collective::testing
