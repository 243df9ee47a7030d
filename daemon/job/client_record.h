// The daemon's view of one client: who it is, its segment, its session and
// its requests. Owned by its Job; touched only by the engine thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "collective/v1/types.pb.h"
#include "daemon/job/client_rings.h"
#include "daemon/job/peer_credentials.h"
#include "daemon/job/session_link.h"
#include "daemon/job/sigbus_guard.h"
#include "shm/client_segment.h"

namespace collective::daemon::job {

struct ClientRecord {
  uint64_t id = 0;
  std::string session_token;
  PeerCredentials peer;
  int64_t reported_pid = 0;  // what the client says its pid is
  int32_t local_rank = 0;
  v1::Topology topology;
  absl::Time registered_at;

  // Until the job forms: the Register call to answer.
  std::shared_ptr<RegisterCall> registration;
  // The static process sets it asked for, each as sorted ranks.
  std::vector<std::vector<int32_t>> static_process_sets;
  // The rendezvous of resident daemons it named (HOST:PORT; empty: none),
  // and its node's place among the job's nodes.
  std::string rendezvous;
  int32_t rendezvous_node = 0;
  int32_t rendezvous_nodes = 1;

  std::unique_ptr<shm::ClientSegment> segment;
  uint64_t arena_bytes = 0;  // the segment's arena: what its requests may address
  std::unique_ptr<CompletionSink> ring;
  std::unique_ptr<SubmissionSource> submissions;
  GuardedRange guard;  // SIGBUS protection of the segment mapping

  std::shared_ptr<SessionLink> link;  // once attached
  absl::Time attached_at;
  std::chrono::steady_clock::time_point attach_deadline;
  bool left = false;  // sent Leave
  bool gone = false;  // its session ended

  // Requests submitted and not yet completed.
  absl::flat_hash_map<uint64_t, uint64_t> outstanding;  // request id -> bytes
  // Completed requests whose result the client still reads.
  struct HeldResult {
    uint64_t block = 0;
    uint64_t bytes = 0;
    std::string tensor;  // kept while a timeline records, for copy-out spans
  };
  absl::flat_hash_map<uint64_t, HeldResult> held_results;  // request id -> result

  uint64_t bytes_submitted = 0;
  uint64_t requests_submitted = 0;
  uint64_t result_bytes_held = 0;

  bool attached() const { return link != nullptr; }
  bool live() const { return !left && !gone; }
};

}  // namespace collective::daemon::job
