// Several collectived started on their own on this machine, as a systemd
// unit or a DaemonSet starts one per node: each on a socket of its own,
// standing in for a node, none under mpirun. A rendezvous server (the one
// collectiverun serves) lets the daemons of a job's nodes form that job's
// world when its ranks register.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/launcher/rendezvous_server.h"
#include "tests/integration/daemon_process.h"

namespace collective::testing {

class ResidentDaemons {
 public:
  // Starts `nodes` daemons (with `flags` besides their own) and the
  // rendezvous server, and waits until every daemon answers.
  static absl::StatusOr<std::unique_ptr<ResidentDaemons>> Start(
      int nodes, const std::vector<std::string>& flags = {});

  int nodes() const { return static_cast<int>(daemons_.size()); }
  DaemonProcess& daemon(int node) { return *daemons_[node]; }
  const std::string& socket(int node) const { return daemons_[node]->socket(); }
  // HOST:PORT of the rendezvous.
  std::string rendezvous() const;

  // Starts a job of id `job_id` on the daemons `job_nodes` (the job's node
  // i is daemon job_nodes[i]): `local_sizes[i]` ranks of `worker` with
  // `args` on each. Workers get, as MpiDaemons gives them, the job's
  // sockets in COLLECTIVE_TEST_SOCKETS, their node in COLLECTIVE_TEST_NODE,
  // the local sizes in COLLECTIVE_TEST_LOCAL_SIZES and the job's size in
  // WORLD_SIZE; and the rendezvous in COLLECTIVE_RENDEZVOUS with
  // COLLECTIVE_NODE/COLLECTIVE_NODES, as collectiverun sets them.
  absl::StatusOr<std::vector<Subprocess>> StartWorkers(const std::string& worker,
                                                       const std::vector<int>& job_nodes,
                                                       const std::vector<int>& local_sizes,
                                                       const std::vector<std::string>& args,
                                                       const std::string& job_id = "") const;
  // The same on daemons 0, 1, ... (one per entry of `local_sizes`).
  absl::StatusOr<std::vector<Subprocess>> StartWorkers(const std::string& worker,
                                                       const std::vector<int>& local_sizes,
                                                       const std::vector<std::string>& args) const;

 private:
  ResidentDaemons() = default;

  std::unique_ptr<launcher::RendezvousServer> rendezvous_;
  std::vector<std::unique_ptr<DaemonProcess>> daemons_;
};

}  // namespace collective::testing
