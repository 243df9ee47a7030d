#include "tests/integration/resident/resident_daemons.h"

#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace collective::testing {

absl::StatusOr<std::unique_ptr<ResidentDaemons>> ResidentDaemons::Start(
    int nodes, const std::vector<std::string>& flags) {
  std::unique_ptr<ResidentDaemons> daemons(new ResidentDaemons());
  auto server = launcher::RendezvousServer::Start({.address = "127.0.0.1"});
  if (!server.ok()) return server.status();
  daemons->rendezvous_ = std::move(*server);
  for (int node = 0; node < nodes; ++node) {
    // Each stands in for a machine of its own: no MPI launcher, and the
    // other daemons reach it on a loopback address of its own.
    std::vector<std::string> own = {"--multi-node", "off", "--node-address",
                                    absl::StrCat("127.0.0.", node + 1)};
    own.insert(own.end(), flags.begin(), flags.end());
    auto daemon = DaemonProcess::Start({.flags = own});
    if (!daemon.ok()) return daemon.status();
    daemons->daemons_.push_back(std::move(*daemon));
  }
  return daemons;
}

std::string ResidentDaemons::rendezvous() const {
  return absl::StrCat("127.0.0.1:", rendezvous_->port());
}

absl::StatusOr<std::vector<Subprocess>> ResidentDaemons::StartWorkers(
    const std::string& worker, const std::vector<int>& job_nodes,
    const std::vector<int>& local_sizes, const std::vector<std::string>& args,
    const std::string& job_id) const {
  std::vector<std::string> sockets;
  for (int node : job_nodes) sockets.push_back(daemons_[node]->socket());
  const int world_size = std::accumulate(local_sizes.begin(), local_sizes.end(), 0);
  std::vector<Subprocess> workers;
  for (size_t node = 0; node < job_nodes.size(); ++node) {
    std::map<std::string, std::string> environment = {
        {"COLLECTIVE_RENDEZVOUS", rendezvous()},
        {"COLLECTIVE_NODE", std::to_string(node)},
        {"COLLECTIVE_NODES", std::to_string(job_nodes.size())},
        {"COLLECTIVE_TEST_SOCKETS", absl::StrJoin(sockets, ",")},
        {"COLLECTIVE_TEST_NODE", std::to_string(node)},
        {"COLLECTIVE_TEST_LOCAL_SIZES", absl::StrJoin(local_sizes, ",")},
        {"WORLD_SIZE", std::to_string(world_size)}};
    if (!job_id.empty()) environment["COLLECTIVE_JOB_ID"] = job_id;
    auto started =
        daemons_[job_nodes[node]]->StartWorkers(worker, local_sizes[node], args, environment);
    if (!started.ok()) return started.status();
    for (Subprocess& process : *started) workers.push_back(std::move(process));
  }
  return workers;
}

absl::StatusOr<std::vector<Subprocess>> ResidentDaemons::StartWorkers(
    const std::string& worker, const std::vector<int>& local_sizes,
    const std::vector<std::string>& args) const {
  std::vector<int> job_nodes(local_sizes.size());
  std::iota(job_nodes.begin(), job_nodes.end(), 0);
  return StartWorkers(worker, job_nodes, local_sizes, args);
}

}  // namespace collective::testing
