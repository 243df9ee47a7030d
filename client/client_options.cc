// ClientOptions::ResolveFromEnvironment: the one place the client library
// reads the environment, which is how launchers (mpirun, torchrun, srun,
// horovodrun) tell a process where it stands.
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "collective/client.h"
#include "common/status_macros.h"
#include "common/timeline_path.h"

namespace collective {
namespace {

constexpr char kDefaultSocket[] = "/run/collectived/collectived.sock";

const char* Env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

absl::Status ParseInt(const char* variable, const char* text, int* out) {
  if (!absl::SimpleAtoi(text, out) || *out < 0) {
    return absl::InvalidArgumentError(absl::StrCat("environment variable ", variable, "='", text,
                                                   "' is not a non-negative integer"));
  }
  return absl::OkStatus();
}

// Launchers, most specific first: (local rank variable, local size variables).
struct LauncherVariables {
  const char* rank;
  const char* size;
  const char* alternative_size;
};
constexpr LauncherVariables kLaunchers[] = {
    {"COLLECTIVE_LOCAL_RANK", "COLLECTIVE_LOCAL_SIZE", nullptr},
    {"LOCAL_RANK", "LOCAL_SIZE", "LOCAL_WORLD_SIZE"},  // torchrun sets LOCAL_WORLD_SIZE
    {"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", nullptr},
    {"HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", nullptr},
    {"MPI_LOCALRANKID", "MPI_LOCALNRANKS", nullptr},  // MPICH's Hydra
};

// Launchers that name a rendezvous of resident daemons: (the store's
// HOST:PORT, or its host with `port`; this node's place; how many nodes).
struct RendezvousVariables {
  const char* address;
  const char* port;
  const char* node;
  const char* nodes;
};
constexpr RendezvousVariables kRendezvousLaunchers[] = {
    {"COLLECTIVE_RENDEZVOUS", nullptr, "COLLECTIVE_NODE", "COLLECTIVE_NODES"},
    {"HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_PORT", "HOROVOD_CROSS_RANK",
     "HOROVOD_CROSS_SIZE"},
};

// The rendezvous, from the first launcher whose address variable is set.
absl::Status ResolveRendezvous(ClientOptions& options) {
  if (options.rendezvous.empty()) {
    for (const RendezvousVariables& launcher : kRendezvousLaunchers) {
      const char* address = Env(launcher.address);
      if (address == nullptr) continue;
      options.rendezvous = address;
      if (launcher.port != nullptr) {
        const char* port = Env(launcher.port);
        if (port == nullptr) {
          return absl::InvalidArgumentError(absl::StrCat("environment variable ", launcher.address,
                                                         " is set but ", launcher.port, " is not"));
        }
        options.rendezvous = absl::StrCat(address, ":", port);
      }
      for (auto [variable, out] :
           {std::pair{launcher.node, &options.node}, std::pair{launcher.nodes, &options.nodes}}) {
        if (*out >= 0) continue;
        const char* value = Env(variable);
        if (value == nullptr) {
          return absl::InvalidArgumentError(absl::StrCat("environment variable ", launcher.address,
                                                         " is set but ", variable, " is not"));
        }
        RETURN_IF_ERROR(ParseInt(variable, value, out));
      }
      break;
    }
  }
  if (options.rendezvous.empty()) return absl::OkStatus();
  if (options.nodes < 1 || options.node < 0 || options.node >= options.nodes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ClientOptions: node ", options.node, " of ", options.nodes,
        " is not a place among the job's nodes (a rendezvous needs both, node < nodes)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ClientOptions::ResolveFromEnvironment() {
  if (socket_path.empty()) {
    const char* socket = Env("COLLECTIVE_SOCKET");
    socket_path = socket != nullptr ? socket : kDefaultSocket;
  }
  if (job_id.empty()) {
    const char* job = Env("COLLECTIVE_JOB_ID");
    job_id = job != nullptr ? job : "default";
  }
  if (arena_bytes == 0) {
    if (const char* arena = Env("COLLECTIVE_ARENA_BYTES")) {
      if (!absl::SimpleAtoi(arena, &arena_bytes)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "environment variable COLLECTIVE_ARENA_BYTES='", arena, "' is not a byte count"));
      }
    }
  }
  if (connect_timeout < absl::ZeroDuration()) {
    connect_timeout = absl::ZeroDuration();
    if (const char* seconds = Env("COLLECTIVE_CONNECT_TIMEOUT_SECONDS")) {
      double parsed = 0;
      if (!absl::SimpleAtod(seconds, &parsed) || !(parsed >= 0) || parsed > 86400) {
        return absl::InvalidArgumentError(
            absl::StrCat("environment variable COLLECTIVE_CONNECT_TIMEOUT_SECONDS='", seconds,
                         "' is not a number of seconds from 0 to 86400"));
      }
      connect_timeout = absl::Seconds(parsed);
    }
  }
  if (const char* timeline = Env("HOROVOD_TIMELINE");
      timeline != nullptr && timeline_file.empty()) {
    // The daemon's working directory means nothing here.
    absl::StatusOr<std::string> path = HorovodTimelinePath(timeline);
    if (!path.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment variable HOROVOD_TIMELINE: ", path.status().message()));
    }
    timeline_file = *std::move(path);
    const char* cycles = Env("HOROVOD_TIMELINE_MARK_CYCLES");
    int marks = 0;
    timeline_mark_cycles = cycles != nullptr && absl::SimpleAtoi(cycles, &marks) && marks != 0;
  }
  RETURN_IF_ERROR(ResolveRendezvous(*this));
  if (local_rank >= 0 && local_size >= 1) return absl::OkStatus();
  if (local_rank >= 0 || local_size >= 1) {
    return absl::InvalidArgumentError(
        "ClientOptions: set both local_rank and local_size, or neither");
  }
  for (const LauncherVariables& launcher : kLaunchers) {
    const char* rank = Env(launcher.rank);
    if (rank == nullptr) continue;
    const char* size_variable = launcher.size;
    const char* size = Env(size_variable);
    if (size == nullptr && launcher.alternative_size != nullptr) {
      size_variable = launcher.alternative_size;
      size = Env(size_variable);
    }
    if (size == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment variable ", launcher.rank, " is set but ", launcher.size,
                       " is not; set both (or pass ClientOptions::local_rank and local_size)"));
    }
    int parsed_rank = 0;
    int parsed_size = 0;
    if (absl::Status status = ParseInt(launcher.rank, rank, &parsed_rank); !status.ok()) {
      return status;
    }
    if (absl::Status status = ParseInt(size_variable, size, &parsed_size); !status.ok()) {
      return status;
    }
    if (parsed_size < 1 || parsed_rank >= parsed_size) {
      return absl::InvalidArgumentError(absl::StrCat(launcher.rank, "=", parsed_rank, " and ",
                                                     size_variable, "=", parsed_size,
                                                     " do not describe a rank of the node"));
    }
    local_rank = parsed_rank;
    local_size = parsed_size;
    return absl::OkStatus();
  }
  // No launcher: a job of one process, as Horovod runs without one.
  local_rank = 0;
  local_size = 1;
  return absl::OkStatus();
}

}  // namespace collective
