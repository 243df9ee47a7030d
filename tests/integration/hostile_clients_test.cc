// Local clients that try to take the daemon down by holding its resources:
// a flood of idle connections past the descriptor limit, connections from
// refused uids and from a user over its share of descriptors, and a client
// that never reads its session stream. Each case checks that the daemon
// stays responsive to everyone else and that what it gives up returns.
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/raw_client.h"

namespace collective::testing {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(20);
constexpr uid_t kNobody = 65534;

// A plain connection to the daemon's socket that never says anything; -1 on
// failure. Async-signal-safe, for forked children.
int ConnectIdle(const sockaddr_un& address) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A connection that says what every HTTP/2 client says first (the
// connection preface), so that the daemon hands it to gRPC, and then
// nothing more; -1 on failure.
int ConnectAndFallSilent(const sockaddr_un& address) {
  static constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  const int fd = ConnectIdle(address);
  if (fd >= 0 && ::write(fd, kPreface, sizeof(kPreface) - 1) != sizeof(kPreface) - 1) {
    ::close(fd);
    return -1;
  }
  return fd;
}

sockaddr_un AddressOf(const std::string& socket) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  socket.copy(address.sun_path, sizeof(address.sun_path) - 1);
  return address;
}

// The daemon's CPU time (user + system) so far, from /proc/<pid>/stat.
absl::Duration CpuTimeOf(pid_t pid) {
  std::ifstream file(absl::StrCat("/proc/", pid, "/stat"));
  std::stringstream text;
  text << file.rdbuf();
  const std::string stat = text.str();
  // Fields after the command (which may hold spaces) start at ") ".
  const std::vector<std::string> fields =
      absl::StrSplit(stat.substr(stat.rfind(')') + 2), ' ', absl::SkipEmpty());
  int64_t user = 0;
  int64_t system = 0;
  // utime and stime are fields 14 and 15 of the line, 12 and 13 here.
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &user) ||
      !absl::SimpleAtoi(fields[12], &system)) {
    return absl::InfiniteDuration();
  }
  return absl::Seconds(static_cast<double>(user + system) / ::sysconf(_SC_CLK_TCK));
}

bool SetDescriptorLimit(pid_t pid, rlim_t limit) {
  const rlimit value{limit, limit};
  return ::prlimit(pid, RLIMIT_NOFILE, &value, nullptr) == 0;
}

// Polls the daemon's stderr until it contains `text`.
bool AwaitLog(DaemonProcess& daemon, const std::string& text, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!absl::StrContains(daemon.process().Stderr(), text)) {
    if (absl::Now() > deadline) return false;
    // Polling a log file against a deadline.
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

class HostileClientsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to limit the daemon and to change uid";
  }

  absl::StatusOr<std::unique_ptr<DaemonProcess>> StartDaemon(std::vector<std::string> extra = {}) {
    std::vector<std::string> flags = SmallMemoryFlags();
    flags.insert(flags.end(), extra.begin(), extra.end());
    return DaemonProcess::Start({.flags = flags, .directory_mode = 0755});
  }
};

TEST_F(HostileClientsTest, DescriptorFloodNeitherSpinsNorLocksOut) {
  auto started = StartDaemon();
  ASSERT_TRUE(started.ok()) << started.status();
  DaemonProcess& daemon = **started;
  const pid_t pid = daemon.process().pid();
  // Room for a few connections beyond what the daemon has open now.
  ASSERT_TRUE(SetDescriptorLimit(pid, OpenDescriptors(pid) + 24)) << std::strerror(errno);

  const sockaddr_un address = AddressOf(daemon.socket());
  // Connections that have spoken: silent ones are closed before they can
  // exhaust anything (SilentConnectionsAreBoundedAndTimedOut).
  std::vector<int> flood;
  for (int i = 0; i < 200; ++i) {
    const int fd = ConnectAndFallSilent(address);
    ASSERT_GE(fd, 0) << "connection " << i << ": " << std::strerror(errno);
    flood.push_back(fd);
  }
  ASSERT_TRUE(AwaitLog(daemon, "accept failed: Too many open files", kTimeout))
      << daemon.process().Stderr();

  // A measurement window, not synchronisation: a daemon retrying accept at
  // once spends all of it on the CPU.
  const absl::Duration window = absl::Seconds(2);
  const absl::Duration cpu_before = CpuTimeOf(pid);
  absl::SleepFor(window);
  const absl::Duration cpu = CpuTimeOf(pid) - cpu_before;
  EXPECT_LT(cpu, window / 5) << "the daemon spent " << cpu << " of " << window
                             << " on the CPU while out of descriptors";
  const size_t failures = Occurrences(daemon.process().Stderr(), "accept failed");
  EXPECT_LE(failures, 2u) << "the daemon logged " << failures << " failed accepts";

  for (const int fd : flood) ::close(fd);
  ASSERT_TRUE(AwaitHealthy(daemon.socket(), kTimeout).ok()) << daemon.process().Stderr();
  auto clients = RawClient::JoinJob(daemon.socket(), 2);
  ASSERT_TRUE(clients.ok()) << clients.status();
  EXPECT_EQ(CheckAllreduce({(*clients)[0].get(), (*clients)[1].get()}, 1, "after-flood"), "");
  EXPECT_TRUE(AwaitLog(daemon, "accepting connections again", kTimeout));
  for (auto& client : *clients) EXPECT_TRUE(client->Leave().ok());
  EXPECT_EQ(StopAndCheck(daemon), "");
}

// Forks a child that runs `child` as uid 65534 (keeping group 0, so that the
// 0660 socket lets it in and the daemon's policy decides) and exits with what
// it returns. `child` may only make system calls: the test process has
// threads.
template <class Child>
pid_t ForkAsNobody(Child child) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const gid_t groups[] = {0};
    if (::setgroups(1, groups) != 0 || ::setgid(0) != 0 || ::setuid(kNobody) != 0) _exit(100);
    _exit(child());
  }
  return pid;
}

// The exit code of child `pid`; nullopt if it did not exit by the deadline
// (it is killed then) or was killed.
std::optional<int> AwaitChild(pid_t pid, absl::Duration timeout) {
  if (pid < 0) return std::nullopt;
  const absl::Time deadline = absl::Now() + timeout;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return std::nullopt;
    }
    // Polling a child against a deadline.
    absl::SleepFor(absl::Milliseconds(10));
  }
  return WIFEXITED(status) ? std::optional<int>(WEXITSTATUS(status)) : std::nullopt;
}

// Of `fds`, how many the daemon closes (end of file) before `deadline`;
// stops once `enough` have been. What gRPC sends first (its settings) is
// read and ignored. Only system calls, for forked children.
int AwaitClosed(const int* fds, int count, int enough, int deadline_ms) {
  pollfd polls[512];
  for (int i = 0; i < count; ++i) polls[i] = {fds[i], POLLIN, 0};
  int closed = 0;
  timespec start{};
  ::clock_gettime(CLOCK_MONOTONIC, &start);
  while (closed < enough) {
    timespec now{};
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    const int64_t elapsed =
        (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
    if (elapsed >= deadline_ms) break;
    if (::poll(polls, static_cast<nfds_t>(count), static_cast<int>(deadline_ms - elapsed)) <= 0) {
      continue;
    }
    for (int i = 0; i < count; ++i) {
      if (polls[i].revents == 0) continue;
      char buffer[256];
      if (::read(polls[i].fd, buffer, sizeof(buffer)) <= 0) {
        ++closed;
        polls[i].fd = -1;
      }
    }
  }
  return closed;
}

// Connections that never say anything are held outside gRPC, at most a
// quarter of the daemon's descriptors of them, and closed at their deadline:
// a flood of them leaves the daemon answering and serving jobs, and every
// one of them is closed in the end. (gRPC itself would keep each one for
// ever: one was still open after 200 s.)
TEST_F(HostileClientsTest, SilentConnectionsAreBoundedAndTimedOut) {
  auto started = StartDaemon({"--silent-connection-timeout-seconds", "2"});
  ASSERT_TRUE(started.ok()) << started.status();
  DaemonProcess& daemon = **started;
  const pid_t pid = daemon.process().pid();
  ASSERT_TRUE(SetDescriptorLimit(pid, OpenDescriptors(pid) + 64)) << std::strerror(errno);

  const sockaddr_un address = AddressOf(daemon.socket());
  constexpr int kFlood = 200;
  std::vector<int> flood;
  for (int i = 0; i < kFlood; ++i) {
    const int fd = ConnectIdle(address);
    ASSERT_GE(fd, 0) << "connection " << i << ": " << std::strerror(errno);
    flood.push_back(fd);
  }
  // While the flood's connections are all still open on this side.
  EXPECT_TRUE(AwaitHealthy(daemon.socket(), kTimeout).ok()) << daemon.process().Stderr();
  auto clients = RawClient::JoinJob(daemon.socket(), 2);
  ASSERT_TRUE(clients.ok()) << clients.status();
  EXPECT_EQ(CheckAllreduce({(*clients)[0].get(), (*clients)[1].get()}, 1, "during-flood"), "");

  // The oldest were closed to make room, the rest at their deadline.
  EXPECT_EQ(AwaitClosed(flood.data(), kFlood, kFlood, 20000), kFlood);
  for (const int fd : flood) ::close(fd);
  // The daemon logs a closure after it closed the descriptor: the line may
  // come a moment after the test saw the end of the connection.
  EXPECT_TRUE(AwaitLog(daemon, "closed: it sent nothing within 2 s of connecting", kTimeout))
      << daemon.process().Stderr();
  EXPECT_TRUE(AwaitLog(daemon, "the most that may wait at once", kTimeout))
      << daemon.process().Stderr();
  EXPECT_FALSE(absl::StrContains(daemon.process().Stderr(), "accept failed"));
  for (auto& client : *clients) EXPECT_TRUE(client->Leave().ok());
  EXPECT_EQ(StopAndCheck(daemon), "");
}

TEST_F(HostileClientsTest, ConnectionsThatSpokeAndFellSilentAreClosed) {
  // Past the listener (they said the HTTP/2 preface), so gRPC holds them:
  // its idle limit, the silent timeout, ends them.
  auto started = StartDaemon({"--silent-connection-timeout-seconds", "1"});
  ASSERT_TRUE(started.ok()) << started.status();
  DaemonProcess& daemon = **started;
  const sockaddr_un address = AddressOf(daemon.socket());
  constexpr int kSilent = 20;
  std::vector<int> silent;
  for (int i = 0; i < kSilent; ++i) {
    const int fd = ConnectAndFallSilent(address);
    ASSERT_GE(fd, 0) << "connection " << i << ": " << std::strerror(errno);
    silent.push_back(fd);
  }
  // A client in a job is not idle: it holds its session call throughout.
  auto clients = RawClient::JoinJob(daemon.socket(), 2);
  ASSERT_TRUE(clients.ok()) << clients.status();
  EXPECT_EQ(AwaitClosed(silent.data(), kSilent, kSilent, 60000), kSilent);
  for (const int fd : silent) ::close(fd);
  EXPECT_EQ(CheckAllreduce({(*clients)[0].get(), (*clients)[1].get()}, 1, "after-idle"), "");
  for (auto& client : *clients) EXPECT_TRUE(client->Leave().ok());
  EXPECT_EQ(StopAndCheck(daemon), "");
}

// A refused peer's connections are served (so that its calls are answered
// PERMISSION_DENIED with the reason, see security_test) but hold no more
// than anyone's: idle ones are closed at the silent timeout, and the
// refusal is logged once, not once per connection. Nobody keeps group 0,
// which the socket here does not belong to; the socket is opened to
// everyone so that the daemon's policy decides.
TEST_F(HostileClientsTest, RefusedUidIsLoggedOnceAndItsIdleConnectionsClosed) {
  auto started =
      StartDaemon({"--socket-group", "4242", "--silent-connection-timeout-seconds", "1"});
  ASSERT_TRUE(started.ok()) << started.status();
  DaemonProcess& daemon = **started;
  ASSERT_EQ(::chmod(daemon.socket().c_str(), 0666), 0);
  const sockaddr_un address = AddressOf(daemon.socket());
  const auto closed = AwaitChild(ForkAsNobody([&address] {
                                   int fds[4];
                                   for (int& fd : fds) {
                                     fd = ConnectIdle(address);
                                     if (fd < 0) return 101;
                                   }
                                   return AwaitClosed(fds, 4, 4, 10000) == 4 ? 0 : 1;
                                 }),
                                 kTimeout);
  EXPECT_EQ(closed, std::optional<int>(0)) << "the daemon kept a refused uid's connections open";
  const std::string log = daemon.process().Stderr();
  EXPECT_TRUE(absl::StrContains(log,
                                "uid 65534 gid 0 refused (its calls are answered "
                                "PERMISSION_DENIED): collectived refuses pid"))
      << log;
  // Logged once, not once per connection.
  EXPECT_EQ(Occurrences(log, "refused (its calls are answered PERMISSION_DENIED)"), 1u) << log;
  EXPECT_TRUE(AwaitHealthy(daemon.socket(), kTimeout).ok());
  EXPECT_EQ(StopAndCheck(daemon), "");
}

TEST_F(HostileClientsTest, UserOverItsShareOfDescriptorsIsClosedAtAccept) {
  auto started = StartDaemon({"--allowed-uids", "65534"});
  ASSERT_TRUE(started.ok()) << started.status();
  DaemonProcess& daemon = **started;
  // A share of a quarter: 64 connections.
  ASSERT_TRUE(SetDescriptorLimit(daemon.process().pid(), 256)) << std::strerror(errno);
  constexpr int kShare = 64;
  constexpr int kOver = 8;
  int held[2];
  int release[2];
  ASSERT_EQ(::pipe2(held, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(release, O_CLOEXEC), 0);
  const sockaddr_un address = AddressOf(daemon.socket());

  // The child holds its connections until the test has checked that root
  // still gets through.
  const pid_t child = ForkAsNobody([&] {
    ::close(held[0]);
    ::close(release[1]);
    int fds[kShare + kOver];
    for (int& fd : fds) {
      fd = ConnectIdle(address);
      if (fd < 0) return 101;
    }
    const char closed = static_cast<char>(AwaitClosed(fds, kShare + kOver, kOver, 10000));
    if (::write(held[1], &closed, 1) != 1) return 102;
    char ignored;
    return ::read(release[0], &ignored, 1) == 0 ? 0 : 103;
  });
  ::close(held[1]);
  ::close(release[0]);
  char closed = -1;
  EXPECT_EQ(::read(held[0], &closed, 1), 1);
  EXPECT_EQ(closed, kOver) << "of " << kShare + kOver
                           << " connections of one uid, the daemon closed " << int{closed}
                           << " within 10 s";
  EXPECT_TRUE(AwaitHealthy(daemon.socket(), kTimeout).ok()) << daemon.process().Stderr();
  ::close(release[1]);
  EXPECT_EQ(AwaitChild(child, kTimeout), std::optional<int>(0));
  ::close(held[0]);
  const std::string log = daemon.process().Stderr();
  EXPECT_TRUE(absl::StrContains(log, "uid 65534 already holds 64 connections")) << log;
  EXPECT_EQ(StopAndCheck(daemon), "");
}

TEST_F(HostileClientsTest, SessionStreamNotReadIsEndedAndItsQueueDropped) {
  auto started = StartDaemon();
  ASSERT_TRUE(started.ok()) << started.status();
  DaemonProcess& daemon = **started;
  const pid_t pid = daemon.process().pid();
  auto clients = RawClient::JoinJob(daemon.socket(), 1);
  ASSERT_TRUE(clients.ok()) << clients.status();
  RawClient& client = *(*clients)[0];
  const int64_t resident_before = ResidentKib(pid);
  client.session().PauseReading();

  // Every CUDA registration, refused by a daemon without a GPU for this
  // client, is answered on the session stream.
  constexpr uint64_t kMost = 400000;
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  uint64_t sent = 0;
  bool ended = false;
  while (sent < kMost && absl::Now() < deadline) {
    v1::ClientMessage message;
    message.mutable_cuda()->set_registration_id(sent + 1);
    message.mutable_cuda()->set_device_uuid(std::string(16, 'u'));
    if (!client.Send(std::move(message))) {
      // The submission ring is full until the daemon drains it.
      absl::SleepFor(absl::Microseconds(200));
      continue;
    }
    ++sent;
    if (sent % 4096 == 0 && absl::StrContains(daemon.process().Stderr(), "messages unread")) {
      ended = true;
      break;
    }
  }
  EXPECT_TRUE(ended) << "the daemon queued " << sent << " unread messages for one session";
  const int64_t resident_after = ResidentKib(pid);
  EXPECT_LT(resident_after - resident_before, 16 << 10)
      << "the daemon grew from " << resident_before << " KiB to " << resident_after << " KiB";

  client.session().ResumeReading();
  const auto end = client.session().AwaitEnd(kTimeout);
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << end->error_message();
  EXPECT_TRUE(
      absl::StrContains(end->error_message(), "the client does not read its session stream"))
      << end->error_message();
  EXPECT_LT(client.session().MessagesRead(), sent);
  auto idle = daemon.AwaitStatus(
      [](const v1::StatusResponse& s) { return s.job().state() == v1::JOB_STATE_IDLE; }, kTimeout);
  EXPECT_TRUE(idle.ok()) << idle.status();
  EXPECT_EQ(StopAndCheck(daemon), "");
}

}  // namespace
}  // namespace collective::testing
