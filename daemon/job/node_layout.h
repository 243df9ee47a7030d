// Where the ranks of a job live: the local sizes of every node, in node
// order. A rank's global number is its node's offset (the ranks of the nodes
// before it) plus its local rank, as in Horovod.
#pragma once

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

namespace collective::daemon::job {

struct NodeLayout {
  int32_t node = 0;                        // this daemon's index
  std::vector<int32_t> local_sizes = {1};  // by node
  std::vector<std::string> hosts;          // by node, when known

  static NodeLayout Single(int32_t local_size) { return {0, {local_size}, {}}; }

  int32_t nodes() const { return static_cast<int32_t>(local_sizes.size()); }
  int32_t world_size() const {
    return std::accumulate(local_sizes.begin(), local_sizes.end(), int32_t{0});
  }
  // The first global rank of `of_node`.
  int32_t offset(int32_t of_node) const {
    return std::accumulate(local_sizes.begin(), local_sizes.begin() + of_node, int32_t{0});
  }
  int32_t offset() const { return offset(node); }
  // The node of a global rank (which must be in [0, world_size())).
  int32_t NodeOf(int32_t rank) const {
    int32_t n = 0;
    while (rank >= local_sizes[n]) rank -= local_sizes[n++];
    return n;
  }
  bool IsLocal(int32_t rank) const { return NodeOf(rank) == node; }
  // Threads of the job that wait busily on this node's machine: the ranks
  // and the engine thread of every node whose host is this node's (several
  // daemons on one machine stand in for nodes in tests), or of this node
  // alone where the hosts are unknown.
  int32_t BusyThreadsOnHost() const {
    if (hosts.size() != local_sizes.size()) return local_sizes[node] + 1;
    int32_t threads = 0;
    for (int32_t n = 0; n < nodes(); ++n) {
      if (hosts[n] == hosts[node]) threads += local_sizes[n] + 1;
    }
    return threads;
  }
  bool homogeneous() const {
    for (int32_t size : local_sizes) {
      if (size != local_sizes.front()) return false;
    }
    return true;
  }
};

}  // namespace collective::daemon::job
