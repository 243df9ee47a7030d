#include "client/launcher/remote_hosts.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace collective::launcher {
namespace {

constexpr absl::Duration kAgentStopTimeout = absl::Seconds(5);

// What a worker writes in its directory, which an agent may report; it may
// not replace what the launcher writes (the world, its markers).
bool IsWorkerMarker(absl::string_view name) {
  return absl::StartsWith(name, "joining-") || absl::StartsWith(name, "reset-");
}

}  // namespace

std::vector<std::string> SshCommand(const Environment& environment, int ssh_port,
                                    const std::string& identity) {
  std::vector<std::string> ssh;
  if (const auto agent = environment.find("OMPI_MCA_plm_rsh_agent"); agent != environment.end()) {
    ssh = absl::StrSplit(agent->second, ' ', absl::SkipWhitespace());
  }
  if (ssh.empty()) ssh.push_back("ssh");
  if (ssh_port != 0) ssh.insert(ssh.end(), {"-p", absl::StrCat(ssh_port)});
  if (!identity.empty()) ssh.insert(ssh.end(), {"-i", identity});
  return ssh;
}

std::string ShellQuote(const std::string& word) {
  return absl::StrCat("'", absl::StrReplaceAll(word, {{"'", "'\\''"}}), "'");
}

HostAgents::HostAgents(std::string hub, RemoteShell shell, Environment environment)
    : hub_(std::move(hub)), shell_(std::move(shell)), environment_(std::move(environment)) {}

HostAgents::~HostAgents() {
  // An agent's stdin ends with its session: it removes its directory and
  // the shared memory left there, and exits, and so does its ssh. What a
  // lost agent left is removed over a session of its own.
  std::vector<ChildProcess> cleanups;
  std::vector<Agent*> all;
  for (auto& [number, agent] : agents_) all.push_back(agent.get());
  for (auto& agent : replaced_) all.push_back(agent.get());
  for (Agent* agent : all) {
    if (!agent->lost) {
      agent->process.CloseStdin();
      continue;
    }
    std::vector<std::string> argv = shell_.ssh;
    argv.push_back(agent->host);
    argv.push_back(
        absl::StrCat(ShellQuote(shell_.self), " --host-cleanup ", ShellQuote(agent->directory)));
    absl::StatusOr<ChildProcess> cleanup =
        ChildProcess::Spawn({.argv = argv, .environment = ToEnvp(environment_)});
    if (cleanup.ok()) cleanups.push_back(std::move(*cleanup));
  }
  const absl::Time deadline = absl::Now() + kAgentStopTimeout;
  for (Agent* agent : all) {
    while (!agent->process.reaped()) {
      PollSet set;
      set.Add(agent->process.pidfd(), [agent] { agent->process.TryReap(); });
      if (agent->errors.has_value() && agent->errors->open()) {
        set.Add(agent->errors->fd(), [agent] { agent->errors->Pump(); });
      }
      if (!set.Wait(deadline)) break;  // ~ChildProcess kills it
    }
    if (agent->errors.has_value()) agent->errors->Drain();
  }
  for (ChildProcess& cleanup : cleanups) {
    while (!cleanup.reaped()) {
      PollSet set;
      set.Add(cleanup.pidfd(), [&cleanup] { cleanup.TryReap(); });
      if (!set.Wait(deadline)) break;
    }
  }
}

std::map<std::string, std::string> HostAgents::HubFiles() const {
  std::map<std::string, std::string> files;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(hub_, error)) {
    const std::string name = entry.path().filename().string();
    // Not the launcher's staging copy (world.new), nor what is not a file.
    if (absl::EndsWith(name, ".new") || !IsRendezvousName(name) || !entry.is_regular_file(error)) {
      continue;
    }
    std::ifstream in(entry.path(), std::ios::binary);
    std::ostringstream content;
    content << in.rdbuf();
    files[name] = content.str();
  }
  return files;
}

void HostAgents::SyncOne(Agent& agent, const std::map<std::string, std::string>& files) {
  if (agent.lost) return;
  std::string batch;
  for (const auto& [name, content] : files) {
    const auto sent = agent.sent.find(name);
    if (sent != agent.sent.end() && sent->second == content) continue;
    batch +=
        EncodeAgentMessage({.kind = AgentMessage::Kind::kFile, .name = name, .content = content});
    agent.sent[name] = content;
  }
  agent.outbox += batch;
  Flush(agent);
}

void HostAgents::Flush(Agent& agent) {
  while (!agent.outbox.empty()) {
    const ssize_t wrote =
        ::write(agent.process.stdin_fd(), agent.outbox.data(), agent.outbox.size());
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote < 0 && errno == EAGAIN) return;  // the rest when it takes more (Watch)
    if (wrote <= 0) {
      // The agent is gone, which its exit reports.
      agent.outbox.clear();
      return;
    }
    agent.outbox.erase(0, static_cast<size_t>(wrote));
  }
}

void HostAgents::Sync() {
  if (agents_.empty()) return;
  const std::map<std::string, std::string> files = HubFiles();
  for (auto& [number, agent] : agents_) SyncOne(*agent, files);
}

std::string HostAgents::DirectoryOf(int number) const {
  const auto replaced = replacements_.find(number);
  return replaced == replacements_.end()
             ? absl::StrCat(hub_, "-host", number)
             : absl::StrCat(hub_, "-host", number, "-", replaced->second);
}

absl::Status HostAgents::Attach(int number, const std::string& host) {
  if (const auto it = agents_.find(number); it != agents_.end()) {
    if (!it->second->lost) return absl::OkStatus();
    // The host is back after its agent was lost: a new agent, in a
    // directory of its own.
    replaced_.push_back(std::move(it->second));
    agents_.erase(it);
    ++replacements_[number];
  }
  const std::string directory = DirectoryOf(number);
  std::vector<std::string> argv = shell_.ssh;
  argv.push_back(host);
  argv.push_back(absl::StrCat(ShellQuote(shell_.self), " --host-agent ", ShellQuote(directory)));
  absl::StatusOr<ChildProcess> process =
      ChildProcess::Spawn({.argv = argv,
                           .environment = ToEnvp(environment_),
                           .output = SpawnOptions::Output::kSeparatePipes,
                           .input_pipe = true});
  if (!process.ok()) {
    return absl::Status(process.status().code(),
                        absl::StrCat("cannot reach ", host, ": ", process.status().message()));
  }
  auto agent = std::make_unique<Agent>(
      Agent{.host = host, .directory = directory, .process = std::move(*process)});
  agent->messages = agent->process.TakeStdout();
  ::fcntl(agent->process.stdin_fd(), F_SETFL,
          ::fcntl(agent->process.stdin_fd(), F_GETFL) | O_NONBLOCK);
  agent->errors.emplace(agent->process.TakeStderr(), absl::StrCat("[", host, "] "), STDERR_FILENO);
  // Its first word says the directory is there: workers sent to the host
  // after this find it.
  const absl::Time deadline = absl::Now() + shell_.start_timeout;
  std::string why;
  while (!agent->said_hello && why.empty()) {
    PollSet set;
    set.Add(agent->messages.get(), [&] {
      if (!Read(*agent, /*events=*/nullptr, why)) return;
      if (!agent->messages.valid()) why = "its session ended";
    });
    if (agent->errors->open()) set.Add(agent->errors->fd(), [&] { agent->errors->Pump(); });
    if (!set.Wait(deadline)) {
      why = absl::StrCat("no answer within ", absl::FormatDuration(shell_.start_timeout));
    }
  }
  if (!why.empty()) {
    agent->errors->Drain();
    return absl::UnavailableError(
        absl::StrCat("cannot start collectiverun's agent on ", host, " (", absl::StrJoin(argv, " "),
                     "): ", why, " (its output, if any, is above as [", host, "] lines)"));
  }
  SyncOne(*agent, HubFiles());
  agents_[number] = std::move(agent);
  return absl::OkStatus();
}

std::vector<std::string> HostAgents::WorkerCommand(const std::string& host,
                                                   const Environment& variables,
                                                   const std::vector<std::string>& command) const {
  std::error_code error;
  const std::string directory = std::filesystem::current_path(error).string();
  std::vector<std::string> words = {"exec", "env"};
  for (const std::string& variable : ToEnvp(variables)) words.push_back(ShellQuote(variable));
  words.push_back(ShellQuote(shell_.self));
  words.push_back("--remote-exec");
  words.push_back(absl::StrCat(shell_.grace_seconds));
  words.push_back("--");
  for (const std::string& word : command) words.push_back(ShellQuote(word));
  std::vector<std::string> argv = shell_.ssh;
  argv.push_back(host);
  // As horovodrun: in the launcher's directory, if the host has it.
  argv.push_back(
      absl::StrCat("cd ", ShellQuote(directory), " >/dev/null 2>&1; ", absl::StrJoin(words, " ")));
  return argv;
}

bool HostAgents::Read(Agent& agent, const Events* events, std::string& why) {
  char buffer[4096];
  const ssize_t got = ::read(agent.messages.get(), buffer, sizeof(buffer));
  if (got < 0) {
    if (errno == EINTR || errno == EAGAIN) return true;
    why = absl::StrCat("its messages cannot be read: ", std::strerror(errno));
    return false;
  }
  if (got == 0) {
    agent.messages.Reset();  // its exit says the rest
    return true;
  }
  agent.reader.Append(absl::string_view(buffer, static_cast<size_t>(got)));
  while (std::optional<absl::StatusOr<AgentMessage>> message = agent.reader.Next()) {
    if (!message->ok()) {
      why = std::string(message->status().message());
      return false;
    }
    switch ((*message)->kind) {
      case AgentMessage::Kind::kMarker: {
        const std::string& name = (*message)->name;
        if (!IsWorkerMarker(name)) {
          why = absl::StrCat("it reported '", name, "', which no worker writes");
          return false;
        }
        agent.sent[name] = "";  // it has it: not sent back
        const std::string path = absl::StrCat(hub_, "/", name);
        const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0) ::close(fd);
        break;
      }
      case AgentMessage::Kind::kReady:
        if (events != nullptr) events->daemon_ready((*message)->name, (*message)->pid);
        break;
      case AgentMessage::Kind::kExited:
        if (events != nullptr) events->daemon_exited((*message)->name, (*message)->pid);
        break;
      case AgentMessage::Kind::kHello:
        agent.said_hello = true;
        break;
      case AgentMessage::Kind::kFile:
        why = "it sent a file";
        return false;
    }
  }
  return true;
}

void HostAgents::Lose(Agent& agent, const std::string& why, const Events& events) {
  if (agent.lost) return;
  agent.lost = true;
  agent.messages.Reset();
  agent.process.CloseStdin();
  agent.process.Signal(SIGTERM);
  events.lost(agent.host, why);
}

void HostAgents::Watch(PollSet& set, const Events& events) {
  for (auto& [number, owned] : agents_) {
    Agent* agent = owned.get();
    if (agent->errors.has_value() && agent->errors->open()) {
      set.Add(agent->errors->fd(), [agent] { agent->errors->Pump(); });
    }
    if (agent->lost) continue;
    if (!agent->outbox.empty() && agent->process.stdin_fd() >= 0) {
      set.AddWritable(agent->process.stdin_fd(), [agent] { Flush(*agent); });
    }
    if (agent->messages.valid()) {
      set.Add(agent->messages.get(), [this, agent, events] {
        std::string why;
        if (!Read(*agent, &events, why))
          Lose(*agent, absl::StrCat("said no agent's word: ", why), events);
      });
    }
    if (!agent->process.reaped()) {
      set.Add(agent->process.pidfd(), [this, agent, events] {
        if (const std::optional<int> status = agent->process.TryReap()) {
          if (agent->errors.has_value()) agent->errors->Drain();
          Lose(*agent, absl::StrCat("ended (its ssh ", DescribeExit(*status), ")"), events);
        }
      });
    }
  }
}

}  // namespace collective::launcher
