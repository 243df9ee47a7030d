// What the children of the launcher find in their environment: the
// launcher's own environment plus, for each rank, where the daemon is,
// which job it belongs to and where it stands. This file is where the
// launcher reads its environment (once, in main); everything else gets the
// map.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "collective/types.h"

namespace collective::launcher {

using Environment = std::map<std::string, std::string>;

// The launcher's own environment.
Environment CurrentEnvironment();

// `environment` as "NAME=value" strings, for exec.
std::vector<std::string> ToEnvp(const Environment& environment);

// The job as every rank sees it.
struct JobIdentity {
  std::string socket;  // the daemon's socket (absolute)
  std::string job_id;
  int size = 0;                    // ranks on this node, which is the whole job
  std::string host = "localhost";  // as -H names this machine, else localhost
};

// Where a rank stands in a job that may span nodes, as libcollective
// reports it: its global rank and the job's size, its rank and the rank
// count on its node, its node's index and the node count (Horovod's cross
// rank and size).
using RankPlacement = collective::Topology;

// Rank `rank` of a job whose nodes run `local_sizes` ranks (in node order,
// ranks numbered node after node as the daemons number them); `rank` must
// be below their sum.
RankPlacement PlaceRank(const std::vector<int>& local_sizes, int rank);

// `base` plus the variables of a rank placed at `placement` on `host`,
// against the daemon on `socket` in job `job_id`: COLLECTIVE_SOCKET,
// COLLECTIVE_JOB_ID, COLLECTIVE_LOCAL_RANK/SIZE (what libcollective reads
// first), and what trainers written for Horovod or torchrun read:
// HOROVOD_RANK/SIZE, HOROVOD_LOCAL_RANK/SIZE, HOROVOD_CROSS_RANK/SIZE,
// HOROVOD_HOSTNAME (as horovodrun sets them), RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_SIZE, LOCAL_WORLD_SIZE. Values from `base` are replaced.
Environment RankEnvironment(const Environment& base, const std::string& socket,
                            const std::string& job_id, const std::string& host,
                            const RankPlacement& placement);

// `base` plus the variables of rank `rank`: COLLECTIVE_SOCKET,
// COLLECTIVE_JOB_ID, COLLECTIVE_LOCAL_RANK/SIZE (what libcollective reads
// first), and what trainers written for Horovod or torchrun read:
// HOROVOD_RANK/SIZE, HOROVOD_LOCAL_RANK/SIZE, HOROVOD_CROSS_RANK/SIZE,
// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_SIZE, LOCAL_WORLD_SIZE. One node:
// the global rank is the local rank.
Environment RankEnvironment(const Environment& base, const JobIdentity& job, int rank);

}  // namespace collective::launcher
