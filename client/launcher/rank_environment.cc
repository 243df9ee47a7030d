#include "client/launcher/rank_environment.h"

#include <cstring>

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

Environment RankEnvironment(const Environment& base, const JobIdentity& job, int rank) {
  Environment environment = base;
  const std::string rank_text = std::to_string(rank);
  const std::string size_text = std::to_string(job.size);
  environment["COLLECTIVE_SOCKET"] = job.socket;
  environment["COLLECTIVE_JOB_ID"] = job.job_id;
  for (const char* name :
       {"COLLECTIVE_LOCAL_RANK", "HOROVOD_RANK", "HOROVOD_LOCAL_RANK", "RANK", "LOCAL_RANK"}) {
    environment[name] = rank_text;
  }
  for (const char* name : {"COLLECTIVE_LOCAL_SIZE", "HOROVOD_SIZE", "HOROVOD_LOCAL_SIZE",
                           "WORLD_SIZE", "LOCAL_SIZE", "LOCAL_WORLD_SIZE"}) {
    environment[name] = size_text;
  }
  environment["HOROVOD_CROSS_RANK"] = "0";
  environment["HOROVOD_CROSS_SIZE"] = "1";
  return environment;
}

}  // namespace collective::launcher
