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

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
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

}  // namespace
}  // namespace collective::launcher
