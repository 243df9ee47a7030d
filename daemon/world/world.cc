#include "daemon/world/world.h"

#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace collective::daemon::world {
namespace {

constexpr auto kStopNoticeDeadline = std::chrono::seconds(2);

std::string HostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown-host";
  return name;
}

}  // namespace

bool LaunchedByMpiLauncher() {
  // Open MPI's mpirun, PMIx launchers (srun --mpi=pmix, the MPI Operator's
  // mpirun), and Hydra/Slurm PMI.
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"}) {
    if (std::getenv(variable) != nullptr) return true;
  }
  return false;
}

absl::Status MpiStatus(int error, absl::string_view what) {
  if (error == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(error, text, &length) != MPI_SUCCESS) length = 0;
  return absl::UnavailableError(
      absl::StrCat(what, " failed: ", length > 0 ? std::string(text, length) : "unknown MPI error",
                   " (MPI error ", error, ")"));
}

std::unique_ptr<World> World::Single() {
  std::unique_ptr<World> world(new World());
  world->node_name_ = HostName();
  return world;
}

absl::StatusOr<std::unique_ptr<World>> World::Create(WorldMode mode) {
  if (mode == WorldMode::kSingle || !LaunchedByMpiLauncher()) return Single();
  std::unique_ptr<World> world(new World());
  world->node_name_ = HostName();
  int provided = 0;
  if (absl::Status init = MpiStatus(
          MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      !init.ok()) {
    return init;
  }
  world->initialised_ = true;
  if (provided < MPI_THREAD_FUNNELED) {
    return absl::FailedPreconditionError(
        "the MPI library does not support MPI_THREAD_FUNNELED, which the daemon needs (its engine "
        "thread calls MPI while other threads serve clients)");
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &world->rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world->size_);
  world->stopping_.assign(static_cast<size_t>(world->size_), false);
  world->stopping_[static_cast<size_t>(world->rank_)] = true;
  for (MPI_Comm* comm : {&world->control_, &world->data_}) {
    if (absl::Status dup = MpiStatus(MPI_Comm_dup(MPI_COMM_WORLD, comm), "MPI_Comm_dup");
        !dup.ok()) {
      return dup;
    }
    MPI_Comm_set_errhandler(*comm, MPI_ERRORS_RETURN);
  }
  log::Mpi().info("node {} of {} ({}) in the MPI world", world->rank_, world->size_,
                  world->node_name_);
  return world;
}

void World::AnnounceStop() {
  if (single() || abandoned_) return;
  const char notice = 0;
  std::vector<MPI_Request> requests;
  for (int node = 0; node < size_; ++node) {
    if (node == rank_) continue;
    MPI_Request request = MPI_REQUEST_NULL;
    if (MPI_Isend(&notice, 1, MPI_CHAR, node, kStopNoticeTag, control_, &request) == MPI_SUCCESS) {
      requests.push_back(request);
    }
  }
  // Every other daemon stops too (a notice breaks its world) and says so:
  // MPI_Finalize then meets them all. One that does not within a while (it
  // died, or left MPI unfinalised itself) would keep MPI_Finalize waiting
  // for good, and so would a notice of ours it never takes: MPI is left
  // unfinalised then.
  const auto deadline = std::chrono::steady_clock::now() + kStopNoticeDeadline;
  int sent = 0;
  while (true) {
    if (!sent && MPI_Testall(static_cast<int>(requests.size()), requests.data(), &sent,
                             MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
      abandoned_ = true;
      return;
    }
    while (TakeStopNotice() >= 0) {
    }
    std::vector<int> silent;
    for (int node = 0; node < size_; ++node) {
      if (!stopping_[static_cast<size_t>(node)]) silent.push_back(node);
    }
    if (sent && silent.empty()) return;
    if (std::chrono::steady_clock::now() > deadline) {
      log::Mpi().warn("{}; leaving MPI unfinalised",
                      !sent ? std::string("not every node took this daemon's stop notice")
                            : absl::StrCat("node ", silent.front(), " did not say that it stops"));
      abandoned_ = true;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

int World::TakeStopNotice() {
  if (single()) return -1;
  int arrived = 0;
  MPI_Status status;
  if (MPI_Iprobe(MPI_ANY_SOURCE, kStopNoticeTag, control_, &arrived, &status) != MPI_SUCCESS ||
      !arrived) {
    return -1;
  }
  char notice = 0;
  MPI_Recv(&notice, 1, MPI_CHAR, status.MPI_SOURCE, kStopNoticeTag, control_, MPI_STATUS_IGNORE);
  if (status.MPI_SOURCE >= 0 && status.MPI_SOURCE < size_) {
    stopping_[static_cast<size_t>(status.MPI_SOURCE)] = true;
  }
  return status.MPI_SOURCE;
}

World::~World() {
  if (!initialised_ || abandoned_) return;
  for (MPI_Comm* comm : {&control_, &data_}) {
    if (*comm != MPI_COMM_NULL) MPI_Comm_free(comm);
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace collective::daemon::world
