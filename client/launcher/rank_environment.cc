#include "client/launcher/rank_environment.h"

#include <cstring>
#include <initializer_list>
#include <numeric>

extern char** environ;

namespace collective::launcher {

Environment CurrentEnvironment() {
  Environment environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const char* equals = std::strchr(*entry, '=');
    if (equals == nullptr) continue;
    // The first of duplicate names wins, as with getenv().
    environment.emplace(std::string(*entry, static_cast<size_t>(equals - *entry)), equals + 1);
  }
  return environment;
}

std::vector<std::string> ToEnvp(const Environment& environment) {
  std::vector<std::string> envp;
  envp.reserve(environment.size());
  for (const auto& [name, value] : environment) envp.push_back(name + "=" + value);
  return envp;
}

RankPlacement PlaceRank(const std::vector<int>& local_sizes, int rank) {
  RankPlacement placement{.rank = rank, .cross_size = static_cast<int>(local_sizes.size())};
  int offset = 0;
  for (int size : local_sizes) {
    if (rank < offset + size) break;
    offset += size;
    ++placement.cross_rank;
  }
  placement.size = std::accumulate(local_sizes.begin(), local_sizes.end(), 0);
  placement.local_rank = rank - offset;
  placement.local_size = local_sizes[static_cast<size_t>(placement.cross_rank)];
  return placement;
}

Environment RankEnvironment(const Environment& base, const std::string& socket,
                            const std::string& job_id, const std::string& host,
                            const RankPlacement& placement) {
  Environment environment = base;
  environment["COLLECTIVE_SOCKET"] = socket;
  environment["COLLECTIVE_JOB_ID"] = job_id;
  environment["HOROVOD_HOSTNAME"] = host;
  const auto set = [&](std::initializer_list<const char*> names, int value) {
    for (const char* name : names) environment[name] = std::to_string(value);
  };
  set({"HOROVOD_RANK", "RANK"}, placement.rank);
  set({"HOROVOD_SIZE", "WORLD_SIZE"}, placement.size);
  set({"COLLECTIVE_LOCAL_RANK", "HOROVOD_LOCAL_RANK", "LOCAL_RANK"}, placement.local_rank);
  set({"COLLECTIVE_LOCAL_SIZE", "HOROVOD_LOCAL_SIZE", "LOCAL_SIZE", "LOCAL_WORLD_SIZE"},
      placement.local_size);
  set({"HOROVOD_CROSS_RANK"}, placement.cross_rank);
  set({"HOROVOD_CROSS_SIZE"}, placement.cross_size);
  return environment;
}

Environment RankEnvironment(const Environment& base, const JobIdentity& job, int rank) {
  return RankEnvironment(
      base, job.socket, job.job_id, job.host,
      {.rank = rank, .size = job.size, .local_rank = rank, .local_size = job.size});
}

}  // namespace collective::launcher
