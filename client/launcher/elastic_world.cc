#include "client/launcher/elastic_world.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/launcher/host_discovery.h"
#include "client/launcher/machines_job.h"

namespace collective::launcher {
namespace {

constexpr char kWorldFile[] = "world";

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// Writes `text` to `path` in one go; the file is created new (0600).
absl::Status WriteNewFile(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Errno(absl::StrCat("cannot create ", path));
  const ssize_t wrote = ::write(fd, text.data(), text.size());
  const int write_errno = errno;
  ::close(fd);
  if (wrote != static_cast<ssize_t>(text.size())) {
    errno = wrote < 0 ? write_errno : ENOSPC;
    return Errno(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

std::string Workers(int count) { return absl::StrCat(count, count == 1 ? " worker" : " workers"); }

}  // namespace

absl::StatusOr<std::unique_ptr<ElasticWorld>> ElasticWorld::Create(Options options,
                                                                   const JobIdentity& job,
                                                                   const Environment& environment,
                                                                   std::vector<std::string> command,
                                                                   OutputOptions output) {
  if (absl::StrContains(job.job_id, '\n')) {
    return absl::InvalidArgumentError("the job id of an elastic job must be one line");
  }
  std::string base = "/tmp";
  if (const auto it = environment.find("TMPDIR");
      it != environment.end() && absl::StartsWith(it->second, "/")) {
    base = it->second;
  }
  // mkdtemp makes it 0700: only this user reads or replaces the world.
  std::string directory = base + "/collectiverun-elastic-XXXXXX";
  if (::mkdtemp(directory.data()) == nullptr) return Errno(absl::StrCat("mkdtemp ", directory));
  if (options.daemon_per_host && ::mkdir((directory + "/daemons").c_str(), 0700) != 0) {
    const absl::Status error = Errno(absl::StrCat("cannot make ", directory, "/daemons"));
    std::error_code ignored;
    std::filesystem::remove_all(directory, ignored);
    return error;
  }
  UniqueFd watch(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!watch.valid() ||
      ::inotify_add_watch(watch.get(), directory.c_str(), IN_CLOSE_WRITE | IN_MOVED_TO) < 0) {
    const absl::Status error = Errno(absl::StrCat("cannot watch ", directory));
    std::error_code ignored;
    std::filesystem::remove_all(directory, ignored);
    return error;
  }
  return std::unique_ptr<ElasticWorld>(new ElasticWorld(options, job, environment,
                                                        std::move(command), std::move(output),
                                                        std::move(directory), std::move(watch)));
}

ElasticWorld::ElasticWorld(Options options, const JobIdentity& job, const Environment& environment,
                           std::vector<std::string> command, OutputOptions output,
                           std::string directory, UniqueFd watch)
    : options_(options),
      job_(job),
      environment_(environment),
      command_(std::move(command)),
      output_(std::move(output)),
      directory_(std::move(directory)),
      watch_(std::move(watch)) {
  if (options_.remote.has_value()) {
    agents_ = std::make_unique<HostAgents>(directory_, *options_.remote, environment_);
  }
}

ElasticWorld::~ElasticWorld() {
  agents_.reset();  // the copies on other machines go first
  std::error_code ignored;
  std::filesystem::remove_all(directory_, ignored);
}

absl::Status ElasticWorld::Start(TrainerGroup& trainers, const std::vector<int>& hosts) {
  if (hosts_.empty()) hosts_.assign(1, job_.host);
  std::vector<int> first;
  for (int i = 0; i < job_.size; ++i) {
    host_of_[next_worker_] = hosts.empty() ? 0 : hosts[static_cast<size_t>(i)];
    first.push_back(next_worker_++);
  }
  if (!options_.daemon_per_host) {
    // The job's one daemon serves already.
    planned_epoch_ = 0;
    if (absl::Status said = DaemonsStarted(); !said.ok()) return said;
  }
  return Publish(first, first, trainers);
}

int ElasticWorld::HostNumber(const std::string& name) {
  const auto known = std::find(hosts_.begin(), hosts_.end(), name);
  if (known != hosts_.end()) return static_cast<int>(known - hosts_.begin());
  hosts_.push_back(name);
  return static_cast<int>(hosts_.size()) - 1;
}

std::string ElasticWorld::SocketOf(int host) const {
  if (!options_.daemon_per_host) return job_.socket;
  return absl::StrCat(DirectoryOf(host), "/daemons/host", host, ".sock");
}

std::optional<int> ElasticWorld::HostOfSocket(const std::string& socket) const {
  for (int host = 0; host < static_cast<int>(hosts_.size()); ++host) {
    if (SocketOf(host) == socket) return host;
  }
  return std::nullopt;
}

bool ElasticWorld::IsRemote(int host) const {
  return agents_ != nullptr && !IsThisMachine(HostName(host));
}

absl::Status ElasticWorld::Reach(int host) {
  return IsRemote(host) ? agents_->Attach(host, HostName(host)) : absl::OkStatus();
}

std::string ElasticWorld::DirectoryOf(int host) const {
  return IsRemote(host) ? agents_->DirectoryOf(host) : directory_;
}

std::optional<ElasticWorld::DaemonPlan> ElasticWorld::DaemonsToStart() const {
  if (!options_.daemon_per_host || planned_epoch_ == running_epoch_) return std::nullopt;
  std::error_code error;
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(directory_, error)) {
    names.push_back(entry.path().filename().string());
  }
  if (error) return std::nullopt;
  // joining-<generation>-<worker> for a generation of the new world.
  const auto joins_new_world = [&](int worker) {
    return std::any_of(names.begin(), names.end(), [&](const std::string& name) {
      const std::vector<absl::string_view> parts = absl::StrSplit(name, '-');
      int generation = 0;
      return parts.size() == 3 && parts[0] == "joining" && parts[2] == absl::StrCat(worker) &&
             absl::SimpleAtoi(parts[1], &generation) && generation >= planned_since_;
    });
  };
  for (int worker : workers_) {
    if (started_in_.at(worker) < planned_since_ && !joins_new_world(worker)) return std::nullopt;
  }
  return DaemonPlan{.epoch = planned_epoch_, .hosts = planned_nodes_};
}

void ElasticWorld::DaemonsLost() {
  if (planned_epoch_ == running_epoch_) {
    ++planned_epoch_;
    planned_since_ = generation_ + 1;
  }
  running_epoch_ = -1;
  running_nodes_.clear();
}

absl::Status ElasticWorld::DaemonsStarted() {
  return DaemonsStarted({.epoch = planned_epoch_, .hosts = planned_nodes_});
}

absl::Status ElasticWorld::DaemonsStarted(const DaemonPlan& plan) {
  running_epoch_ = plan.epoch;
  running_nodes_ = plan.hosts;
  return WriteNewFile(absl::StrCat(directory_, "/daemons-", running_epoch_), "");
}

absl::StatusOr<std::string> ElasticWorld::Remove(int worker, TrainerGroup& trainers, bool replace) {
  Exited(worker);  // idempotent
  std::vector<int> survivors = workers_;
  std::vector<int> added;
  if (replace && options_.restarts > 0 && static_cast<int>(survivors.size()) < options_.max_ranks) {
    // The replacement takes the failed worker's slot, on its host.
    host_of_[next_worker_] = host_of_.at(worker);
    added.push_back(next_worker_++);
    --options_.restarts;
  }
  const int size = static_cast<int>(survivors.size() + added.size());
  if (size < options_.min_ranks) {
    return absl::FailedPreconditionError(absl::StrCat(
        "only ", Workers(size), " would remain, fewer than --min-np ", options_.min_ranks));
  }
  std::vector<int> next = survivors;
  next.insert(next.end(), added.begin(), added.end());
  ++failures_;
  if (absl::Status published = Publish(next, added, trainers); !published.ok()) return published;
  return absl::StrCat(
      "re-forming the job with ", Workers(size),
      added.empty() ? "" : absl::StrCat(" (worker ", added.front(), " replaces it)"),
      " as generation ", generation_);
}

absl::StatusOr<std::string> ElasticWorld::Add(TrainerGroup& trainers,
                                              const std::vector<int>& hosts) {
  if (static_cast<int>(workers_.size() + hosts.size()) > options_.max_ranks) {
    return absl::FailedPreconditionError(absl::StrCat("the job has ",
                                                      Workers(static_cast<int>(workers_.size())),
                                                      ", as many as --max-np allows; none added"));
  }
  std::vector<int> added;
  std::vector<std::string> where;
  for (int host : hosts) {
    host_of_[next_worker_] = host;
    added.push_back(next_worker_++);
    if (std::find(where.begin(), where.end(), HostName(host)) == where.end()) {
      where.push_back(HostName(host));
    }
  }
  std::vector<int> next = workers_;
  next.insert(next.end(), added.begin(), added.end());
  if (absl::Status published = Publish(next, added, trainers); !published.ok()) {
    return published;
  }
  return absl::StrCat(
      added.size() == 1 ? "worker " : "workers ", absl::StrJoin(added, ", "), " added",
      options_.daemon_per_host ? absl::StrCat(" on ", absl::StrJoin(where, ", ")) : "",
      "; the job re-forms with ", Workers(static_cast<int>(next.size())), " as generation ",
      generation_, " at its next commit");
}

void ElasticWorld::Withdraw(int worker) {
  Exited(worker);  // idempotent
  ++failures_;
}

void ElasticWorld::Exited(int worker) {
  workers_.erase(std::remove(workers_.begin(), workers_.end(), worker), workers_.end());
  // Best effort: without it, a worker that waits to join gives up at its
  // deadline rather than hanging.
  WriteNewFile(absl::StrCat(directory_, "/exited-", worker), "").IgnoreError();
}

absl::StatusOr<std::optional<std::string>> ElasticWorld::OnDirectoryChanged(
    TrainerGroup& trainers) {
  // Drains the events: which file changed does not matter, the markers do.
  alignas(inotify_event) char events[4096];
  while (::read(watch_.get(), events, sizeof(events)) > 0) {
  }
  if (!EveryWorkerAwaitsReset()) return std::nullopt;
  ++failures_;
  if (absl::Status published = Publish(workers_, {}, trainers); !published.ok()) {
    return published;
  }
  return absl::StrCat("a collective failed on every worker; re-forming the job with the same ",
                      Workers(static_cast<int>(workers_.size())), " as generation ", generation_);
}

bool ElasticWorld::EveryWorkerAwaitsReset() const {
  std::error_code error;
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(directory_, error)) {
    names.push_back(entry.path().filename().string());
  }
  if (error) return false;
  const auto has = [&](const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  // joining-<generation>-<worker>, for any generation.
  const auto joined = [&](int worker) {
    return std::any_of(names.begin(), names.end(), [&](const std::string& name) {
      const std::vector<absl::string_view> parts = absl::StrSplit(name, '-');
      return parts.size() == 3 && parts[0] == "joining" && parts[2] == absl::StrCat(worker);
    });
  };
  bool any = false;
  for (int worker : workers_) {
    if (has(absl::StrCat("reset-", failures_, "-", worker))) {
      any = true;
    } else if (joined(worker)) {
      return false;  // still running its job, or yet to notice that it failed
    }
    // Else it was added and has not joined yet: it joins the generation
    // published next.
  }
  return any;
}

absl::Status ElasticWorld::Publish(const std::vector<int>& listed, const std::vector<int>& added,
                                   TrainerGroup& trainers) {
  const int generation = generation_ + 1;
  if (options_.reset_limit >= 0 && generation > options_.reset_limit) {
    return absl::FailedPreconditionError(absl::StrCat("the job has re-formed ", generation_,
                                                      " times, as many as --reset-limit ",
                                                      options_.reset_limit, " allows"));
  }
  // The nodes, in the order their hosts first come among `listed`; the
  // workers grouped by node in rank order.
  std::vector<int> nodes;
  for (int worker : listed) {
    if (std::find(nodes.begin(), nodes.end(), host_of_.at(worker)) == nodes.end()) {
      nodes.push_back(host_of_.at(worker));
    }
  }
  std::vector<int> workers;
  std::vector<int> local_sizes;
  for (int host : nodes) {
    const size_t before = workers.size();
    for (int worker : listed) {
      if (host_of_.at(worker) == host) workers.push_back(worker);
    }
    local_sizes.push_back(static_cast<int>(workers.size() - before));
  }
  if (nodes != planned_nodes_) {
    // Other nodes: another world of daemons serves this generation.
    if (options_.daemon_per_host) ++planned_epoch_;
    planned_nodes_ = nodes;
    planned_since_ = generation;
  }
  const std::string job_id = absl::StrCat(job_.job_id, ".", generation);
  // A worker that joins must not register with the new job before every
  // member of the previous one has left it (the daemon serves one job at a
  // time): it waits for their markers (collective.common.elastic_rendezvous).
  const std::string awaited = absl::StrJoin(workers_, " ");
  // Every host's agent serves before any worker starts (a worker looks for
  // its directory, which a new agent, after one was lost, has anew): a
  // machine that cannot be reached starts none.
  for (int worker : added) {
    if (absl::Status reached = Reach(host_of_.at(worker)); !reached.ok()) return reached;
  }
  for (int worker : added) {
    const int rank =
        static_cast<int>(std::find(workers.begin(), workers.end(), worker) - workers.begin());
    const int host = host_of_.at(worker);
    Environment environment = RankEnvironment(environment_, SocketOf(host), job_id, HostName(host),
                                              PlaceRank(local_sizes, rank));
    environment["COLLECTIVE_ELASTIC_DIR"] = DirectoryOf(host);
    environment["COLLECTIVE_ELASTIC_WORKER"] = absl::StrCat(worker);
    environment["COLLECTIVE_ELASTIC_GENERATION"] = absl::StrCat(generation);
    environment["COLLECTIVE_ELASTIC_FAILURES"] = absl::StrCat(failures_);
    environment["COLLECTIVE_ELASTIC_AWAIT"] = awaited;
    environment["COLLECTIVE_ELASTIC_HOST"] = HostName(host);
    // What horovodrun sets for an elastic job's workers, which Horovod's
    // own code (and scripts written for it) read.
    environment["HOROVOD_ELASTIC"] = absl::StrCat(1);
    absl::Status started;
    if (IsRemote(host)) {
      std::erase_if(environment,
                    [](const auto& variable) { return !ExportedToOtherMachines(variable.first); });
      started = trainers.Add(worker, agents_->WorkerCommand(HostName(host), environment, command_),
                             agents_->environment(), output_, /*input_pipe=*/true);
    } else {
      started = trainers.Add(worker, command_, environment, output_);
    }
    if (!started.ok()) return started;
    started_in_[worker] = generation;
  }
  generation_ = generation;
  workers_ = std::move(workers);
  local_sizes_ = std::move(local_sizes);
  return WriteWorld();
}

absl::Status ElasticWorld::WriteWorld() const {
  const std::string text = absl::StrCat(
      "generation ", generation_, "\njob_id ", job_.job_id, ".", generation_, "\nworkers ",
      absl::StrJoin(workers_, " "), "\nfailures ", failures_, "\nlocal_sizes ",
      absl::StrJoin(local_sizes_, " "), "\ndaemons ", planned_epoch_, "\n");
  const std::string path = absl::StrCat(directory_, "/", kWorldFile);
  const std::string staging = absl::StrCat(path, ".new");
  if (absl::Status wrote = WriteNewFile(staging, text); !wrote.ok()) return wrote;
  // rename(2) replaces it atomically: a reader sees one generation or the
  // next, never half of one.
  if (std::rename(staging.c_str(), path.c_str()) != 0) {
    return Errno(absl::StrCat("cannot rename ", staging, " to ", path));
  }
  return absl::OkStatus();
}

}  // namespace collective::launcher
