// collectiverun's host agent and remote worker (host_agent.h), as the
// launcher drives them over an ssh session, here over the same pipes without
// ssh: the agent makes its directory, writes what it is sent, reports each
// marker a worker writes (once), relays a daemon's READY=1 and exit, and
// removes everything when its session ends; a remote worker exits as its
// command does and is stopped when its session ends.
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/launcher/agent_protocol.h"
#include "client/launcher/child_process.h"
#include "client/launcher/launcher_output.h"
#include "client/launcher/poll_set.h"
#include "client/launcher/rank_environment.h"
#include "client/launcher/remote_hosts.h"
#include "tests/common/temporary_directory.h"

namespace collective::launcher {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kDeadline = absl::Seconds(20);

// The agent on a pipe, as collectiverun holds it at the end of ssh.
class Agent {
 public:
  explicit Agent(const std::string& directory) {
    auto process = ChildProcess::Spawn({.argv = {COLLECTIVERUN_BINARY, "--host-agent", directory},
                                        .environment = ToEnvp(CurrentEnvironment()),
                                        .output = SpawnOptions::Output::kSeparatePipes,
                                        .input_pipe = true});
    EXPECT_TRUE(process.ok()) << process.status();
    process_.emplace(std::move(*process));
    messages_ = process_->TakeStdout();
  }

  // The next message, or nullopt past the deadline or at the end.
  std::optional<AgentMessage> Next() {
    const absl::Time deadline = absl::Now() + kDeadline;
    while (true) {
      if (auto message = reader_.Next()) {
        EXPECT_TRUE(message->ok()) << message->status();
        if (!message->ok()) return std::nullopt;
        return **message;
      }
      bool ended = false;
      PollSet set;
      set.Add(messages_.get(), [&] {
        char buffer[4096];
        const ssize_t got = ::read(messages_.get(), buffer, sizeof(buffer));
        if (got <= 0) ended = true;
        if (got > 0) reader_.Append(absl::string_view(buffer, static_cast<size_t>(got)));
      });
      if (!set.Wait(deadline) || ended) return std::nullopt;
    }
  }

  void Send(const AgentMessage& message) {
    ASSERT_TRUE(WriteAll(process_->stdin_fd(), EncodeAgentMessage(message)));
  }

  // Ends the session; the agent's exit status.
  std::optional<int> End() {
    process_->CloseStdin();
    return Wait();
  }

  std::optional<int> Wait() {
    while (!process_->reaped()) {
      PollSet set;
      set.Add(process_->pidfd(), [&] { process_->TryReap(); });
      if (!set.Wait(absl::Now() + kDeadline)) return std::nullopt;
    }
    return process_->status();
  }

 private:
  std::optional<ChildProcess> process_;
  UniqueFd messages_;
  AgentMessageReader reader_;
};

std::string Read(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A child process that says READY=1 for `socket` on `notify`, then waits
// for the write end of the pipe `hold` to close and exits.
pid_t StartReadyDaemon(const std::string& notify, const std::string& socket, const int hold[2]) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::close(hold[1]);
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", notify.c_str());
  const std::string text = "READY=1\nSTATUS=idle, serving " + socket;
  ::sendto(fd, text.data(), text.size(), 0, reinterpret_cast<const sockaddr*>(&address),
           sizeof(address));
  char byte;
  while (::read(hold[0], &byte, 1) > 0) {
  }
  ::_exit(0);
}

TEST(HostAgentTest, KeepsTheCopyOfTheDirectoryAndRelaysTheDaemon) {
  testing::TemporaryDirectory scratch;
  const std::string directory = scratch.path() + "/job-host1";
  Agent agent(directory);
  std::optional<AgentMessage> hello = agent.Next();
  ASSERT_TRUE(hello.has_value());
  EXPECT_EQ(hello->kind, AgentMessage::Kind::kHello);
  EXPECT_EQ(hello->name, directory);
  EXPECT_EQ(std::filesystem::status(directory).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_all);
  EXPECT_TRUE(std::filesystem::is_directory(directory + "/daemons"));

  // What the launcher sends is written whole (and replaced whole).
  agent.Send({.kind = AgentMessage::Kind::kFile, .name = "world", .content = "generation 0\n"});
  agent.Send({.kind = AgentMessage::Kind::kFile, .name = "world", .content = "generation 1\n"});
  agent.Send({.kind = AgentMessage::Kind::kFile, .name = "exited-3", .content = ""});
  // A worker's marker is reported once; what the launcher sent is not.
  { std::ofstream(directory + "/joining-1-0"); }
  std::optional<AgentMessage> marker = agent.Next();
  ASSERT_TRUE(marker.has_value());
  EXPECT_EQ(marker->kind, AgentMessage::Kind::kMarker);
  EXPECT_EQ(marker->name, "joining-1-0");
  EXPECT_EQ(Read(directory + "/world"), "generation 1\n");
  EXPECT_TRUE(std::filesystem::exists(directory + "/exited-3"));

  // A daemon's readiness and exit.
  const std::string socket = directory + "/daemons/host1.sock";
  int hold[2];
  ASSERT_EQ(::pipe2(hold, O_CLOEXEC), 0);
  const pid_t daemon = StartReadyDaemon(directory + "/notify", socket, hold);
  ::close(hold[0]);
  std::optional<AgentMessage> ready = agent.Next();
  ASSERT_TRUE(ready.has_value());
  EXPECT_EQ(ready->kind, AgentMessage::Kind::kReady);
  EXPECT_EQ(ready->name, socket);
  EXPECT_EQ(ready->pid, daemon);
  ::close(hold[1]);
  int status = 0;
  ::waitpid(daemon, &status, 0);
  std::optional<AgentMessage> exited = agent.Next();
  ASSERT_TRUE(exited.has_value());
  EXPECT_EQ(exited->kind, AgentMessage::Kind::kExited);
  EXPECT_EQ(exited->pid, daemon);

  // The session ends: nothing is left.
  const std::optional<int> end = agent.End();
  ASSERT_TRUE(end.has_value());
  EXPECT_TRUE(WIFEXITED(*end) && WEXITSTATUS(*end) == 0) << DescribeExit(*end);
  EXPECT_FALSE(std::filesystem::exists(directory));
}

TEST(HostAgentTest, ADirectoryThatExistsOrAMalformedMessageEndsTheAgent) {
  testing::TemporaryDirectory scratch;
  Agent taken(scratch.path());  // exists already
  EXPECT_FALSE(taken.Next().has_value());
  std::optional<int> status = taken.Wait();
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(ShellExitCode(*status), 1);
  EXPECT_TRUE(std::filesystem::exists(scratch.path())) << "not the agent's to remove";

  const std::string directory = scratch.path() + "/copy";
  Agent agent(directory);
  ASSERT_TRUE(agent.Next().has_value());
  agent.Send({.kind = AgentMessage::Kind::kMarker, .name = "joining-0-0"});  // not the launcher's
  status = agent.Wait();
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(ShellExitCode(*status), 1);
  EXPECT_FALSE(std::filesystem::exists(directory));
}

int RunCleanup(const std::string& directory) {
  auto cleanup = ChildProcess::Spawn({.argv = {COLLECTIVERUN_BINARY, "--host-cleanup", directory},
                                      .environment = ToEnvp(CurrentEnvironment()),
                                      .output = SpawnOptions::Output::kOnePipe});
  EXPECT_TRUE(cleanup.ok()) << cleanup.status();
  PollSet set;
  set.Add(cleanup->pidfd(), [] {});
  EXPECT_TRUE(set.Wait(absl::Now() + kDeadline));
  return ShellExitCode(cleanup->TryReap().value_or(-1));
}

// What a killed agent left is removed by a clean-up run over ssh, which
// takes nothing but an agent's directory.
TEST(HostAgentTest, ACleanUpRemovesOnlyAnAgentsDirectory) {
  testing::TemporaryDirectory scratch;
  const std::string copy = scratch.path() + "/collectiverun-elastic-Ab12Cd-host3";
  ASSERT_EQ(::mkdir(copy.c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((copy + "/daemons").c_str(), 0700), 0);
  { std::ofstream(copy + "/world") << "generation 2\n"; }
  EXPECT_EQ(RunCleanup(copy), 0);
  EXPECT_FALSE(std::filesystem::exists(copy));

  const std::string other = scratch.path() + "/precious";
  ASSERT_EQ(::mkdir(other.c_str(), 0700), 0);
  EXPECT_EQ(RunCleanup(other), 1);
  const std::string open_copy = scratch.path() + "/collectiverun-elastic-Ab12Cd-host4";
  ASSERT_EQ(::mkdir(open_copy.c_str(), 0755), 0);
  EXPECT_EQ(RunCleanup(open_copy), 1) << "not 0700: not an agent's";
  EXPECT_EQ(RunCleanup("relative/collectiverun-elastic-Ab12Cd-host5"), 1);
  EXPECT_TRUE(std::filesystem::exists(other));
  EXPECT_TRUE(std::filesystem::exists(open_copy));
}

// A remote worker: its command's exit code, and a stop when its session ends.
TEST(HostAgentTest, ARemoteWorkerExitsAsItsCommandAndStopsWithItsSession) {
  auto exits = ChildProcess::Spawn(
      {.argv = {COLLECTIVERUN_BINARY, "--remote-exec", "5", "--", "sh", "-c", "exit 3"},
       .environment = ToEnvp(CurrentEnvironment()),
       .input_pipe = true});
  ASSERT_TRUE(exits.ok()) << exits.status();
  PollSet set;
  set.Add(exits->pidfd(), [] {});
  ASSERT_TRUE(set.Wait(absl::Now() + kDeadline));
  ASSERT_TRUE(exits->TryReap().has_value());
  EXPECT_EQ(ShellExitCode(*exits->status()), 3);

  // A command that would run for a minute, whose session ends.
  auto sleeper = ChildProcess::Spawn(
      {.argv = {COLLECTIVERUN_BINARY, "--remote-exec", "5", "--", "sleep", "60"},
       .environment = ToEnvp(CurrentEnvironment()),
       .input_pipe = true});
  ASSERT_TRUE(sleeper.ok()) << sleeper.status();
  const absl::Time ended = absl::Now();
  sleeper->CloseStdin();
  PollSet wait;
  wait.Add(sleeper->pidfd(), [] {});
  ASSERT_TRUE(wait.Wait(absl::Now() + kDeadline));
  ASSERT_TRUE(sleeper->TryReap().has_value());
  EXPECT_EQ(ShellExitCode(*sleeper->status()), 128 + SIGTERM);
  EXPECT_LT(absl::Now() - ended, absl::Seconds(5)) << "SIGTERM, not the grace's SIGKILL";
}

// collectiverun's side (HostAgents) with an "ssh" that runs the command on
// this machine (sh -c), as the real one runs it on the host.
RemoteShell LocalShell() {
  return {.ssh = {"sh", "-c", "exec sh -c \"$2\"", "ssh"},
          .self = COLLECTIVERUN_BINARY,
          .grace_seconds = 5,
          .start_timeout = kDeadline};
}

// The pid of the process one of whose arguments is `argument`, or -1.
pid_t PidWithArgument(const std::string& argument) {
  DIR* proc = ::opendir("/proc");
  pid_t found = -1;
  while (dirent* entry = proc != nullptr ? ::readdir(proc) : nullptr) {
    const std::string line = Read(absl::StrCat("/proc/", entry->d_name, "/cmdline"));
    size_t start = 0;
    for (size_t end = line.find('\0'); end != std::string::npos;
         start = end + 1, end = line.find('\0', start)) {
      if (line.compare(start, end - start, argument) == 0) found = std::atoi(entry->d_name);
    }
  }
  if (proc != nullptr) ::closedir(proc);
  return found;
}

// Until `path` holds `content` (or the deadline): an agent writes what it
// was sent on its own time.
bool AwaitContent(const std::string& path, const std::string& content) {
  UniqueFd watch(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  const std::string directory = std::filesystem::path(path).parent_path().string();
  if (::inotify_add_watch(watch.get(), directory.c_str(), IN_MOVED_TO | IN_CLOSE_WRITE) < 0) {
    return false;
  }
  const absl::Time deadline = absl::Now() + kDeadline;
  while (Read(path) != content) {
    PollSet set;
    set.Add(watch.get(), [&] {
      alignas(inotify_event) char events[4096];
      while (::read(watch.get(), events, sizeof(events)) > 0) {
      }
    });
    if (!set.Wait(deadline)) return Read(path) == content;
  }
  return true;
}

// Until `done` (or the deadline), drives `agents` as the launcher's loop does.
bool DriveUntil(HostAgents& agents, const HostAgents::Events& events,
                const std::function<bool()>& done) {
  const absl::Time deadline = absl::Now() + kDeadline;
  while (!done()) {
    PollSet set;
    agents.Watch(set, events);
    if (!set.Wait(deadline)) return done();
  }
  return true;
}

TEST(HostAgentsTest, MirrorTheDirectoryBothWaysAndReplaceALostAgent) {
  testing::TemporaryDirectory scratch;
  const std::string hub = scratch.path() + "/collectiverun-elastic-T3st00";
  ASSERT_EQ(::mkdir(hub.c_str(), 0700), 0);
  { std::ofstream(hub + "/world") << "generation 0\n"; }
  std::string lost_host, first, second;
  {
    HostAgents agents(hub, LocalShell(), CurrentEnvironment());
    ASSERT_TRUE(agents.Attach(1, "machine-x").ok());
    first = agents.DirectoryOf(1);
    EXPECT_EQ(first, hub + "-host1");
    EXPECT_TRUE(AwaitContent(first + "/world", "generation 0\n")) << "every file at once";

    // A change reaches the copy at the next Sync, whole.
    { std::ofstream(hub + "/world.new") << "generation 1\n"; }
    ASSERT_EQ(std::rename((hub + "/world.new").c_str(), (hub + "/world").c_str()), 0);
    agents.Sync();
    EXPECT_TRUE(AwaitContent(first + "/world", "generation 1\n"));
    EXPECT_FALSE(std::filesystem::exists(first + "/world.new")) << "not the staging copy";

    // A worker's marker there comes back here.
    const HostAgents::Events events{
        .daemon_ready = [](const std::string&, pid_t) {},
        .daemon_exited = [](const std::string&, pid_t) {},
        .lost = [&](const std::string& host, const std::string&) { lost_host = host; }};
    { std::ofstream(first + "/joining-1-0"); }
    EXPECT_TRUE(
        DriveUntil(agents, events, [&] { return std::filesystem::exists(hub + "/joining-1-0"); }));

    // The agent is killed: the host is lost, and a new agent comes in a
    // directory of its own.
    const pid_t agent = PidWithArgument(first);
    ASSERT_GT(agent, 0);
    ASSERT_EQ(::kill(agent, SIGKILL), 0);
    EXPECT_TRUE(DriveUntil(agents, events, [&] { return !lost_host.empty(); }));
    EXPECT_EQ(lost_host, "machine-x");
    ASSERT_TRUE(agents.Attach(1, "machine-x").ok());
    second = agents.DirectoryOf(1);
    EXPECT_EQ(second, hub + "-host1-1");
    EXPECT_TRUE(AwaitContent(second + "/world", "generation 1\n"));
    EXPECT_TRUE(std::filesystem::exists(first)) << "what the killed agent left, until the end";
  }
  // The end: the live agent removes its copy, and the lost one's is removed
  // by a clean-up run.
  EXPECT_FALSE(std::filesystem::exists(second));
  EXPECT_FALSE(std::filesystem::exists(first));
}

}  // namespace
}  // namespace collective::launcher
