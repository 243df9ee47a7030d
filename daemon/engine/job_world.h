// What a job that spans nodes runs on: its daemons' world. This node's
// place in it, the transport of the job's transfers, the groups of its
// process sets, the control link of its negotiation, and the breaking of
// the world (a node died or fell silent, a transfer failed). The MPI world
// that mpirun or srun started the daemons in serves each job through an
// MpiJobWorld (mpi_job_world.h): every job spans the whole world, and a
// broken world forms no other job. A job's run owns its JobWorld from the
// moment the job forms across nodes until its teardown. Engine thread only.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/exec/node_transport.h"
#include "daemon/exec/set_groups.h"
#include "daemon/gpu/gpu_executor.h"
#include "daemon/job/node_layout.h"
#include "daemon/negotiation/control_link.h"

namespace collective::daemon::engine {

class JobWorld {
 public:
  virtual ~JobWorld() = default;

  // This node's place among the job's nodes, and its host name.
  virtual int node() const = 0;
  virtual const std::string& node_name() const = 0;

  // The transport of the job's collectives and messages across nodes.
  virtual exec::NodeTransport& transport() = 0;
  // As the job forms across nodes (every node at this point, with the same
  // layout): the groups of its sets, the global set's made now.
  virtual absl::StatusOr<std::unique_ptr<exec::SetGroups>> MakeSetGroups(
      const job::NodeLayout& layout) = 0;
  // The control link of the job's negotiation: messages of an earlier job
  // never arrive on it.
  virtual std::unique_ptr<negotiation::ControlLink> MakeControlLink() = 0;
  // NCCL's communicator layout, shared among the job's nodes (a collective
  // call of every node, in decision order).
  virtual absl::StatusOr<gpu::GlobalLayout> ShareNcclLayout(int local_devices,
                                                            const gpu::NewUniqueId& new_id) = 0;

  // Transfers that did not finish may still own the job's memory: they are
  // left to the transport (an MPI world leaves them to the process's exit).
  virtual bool abandoned() const = 0;
  // The world broke so that nothing decided can finish any more (a node is
  // gone, or a transfer failed half done): what the job awaits fails now.
  virtual bool lost() const = 0;
  // This daemon stops (the other nodes hear it with the job's end).
  virtual bool stopping() const = 0;
  // The world broke: the job cannot go on across nodes.
  virtual bool broken() const = 0;
  // Breaks the world with `why`. `abandon`: its transfers cannot be trusted
  // to finish (a node is gone, or a transfer failed half done).
  virtual void Break(const absl::Status& why, bool abandon) = 0;
};

}  // namespace collective::daemon::engine
