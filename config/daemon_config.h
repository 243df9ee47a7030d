// The daemon's configuration: every knob as a typed field. The schema (name,
// type, default, environment variable, description, validation) is declared
// once, in knobs.cc; this struct only holds the effective values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace collective::config {

enum class LogFormat { kText, kJson };

// Whether each log line on stderr starts with its syslog priority ("<3>"),
// which journald turns into the entry's PRIORITY (sd-daemon(3)).
enum class LogPriorityPrefix {
  kAuto,    // when stderr is systemd's journal (JOURNAL_STREAM names it)
  kAlways,  // e.g. a journal reached through a pipe systemd did not set up
  kNever,
};

// Whether the daemon joins an MPI world of daemons (one per node).
enum class MultiNode {
  kAuto,  // when an MPI launcher (mpirun, srun) started it
  kOff,   // never: a world of one node
};

// How the engine sleeps while it waits for submissions.
enum class EngineWait {
  kAuto,      // on every client's own word (futex_waitv) where it can
  kDoorbell,  // on the job's one doorbell word, whatever the kernel
};

struct DaemonConfig {
  // Unix socket clients and collectivectl connect to.
  std::string socket = "/run/collectived/collectived.sock";
  // Group of the socket file (name or number); empty: the daemon's own group.
  std::string socket_group;
  // Peers allowed besides the daemon's own uid and root.
  std::vector<uint32_t> allowed_uids;
  // Peers whose primary or supplementary groups include a listed gid are
  // allowed too, as are those of the socket's group.
  std::vector<uint32_t> allowed_gids;
  // A new connection that sends nothing for this long is closed.
  double silent_connection_timeout_seconds = 10.0;

  // "info" or "info,coord=debug,rpc=trace" (see common/logging.h).
  std::string log_level = "info";
  LogFormat log_format = LogFormat::kText;
  LogPriorityPrefix log_priority_prefix = LogPriorityPrefix::kAuto;

  // Chrome-trace file the daemon records from start-up (absolute; empty: no
  // timeline until `collectivectl timeline start`), and whether it marks
  // every engine cycle in it.
  std::string timeline_file;
  bool timeline_mark_cycles = false;

  // How long a job may take to form, from its first registration, and how
  // long a registered client may take to open its session.
  double register_timeout_seconds = 60.0;
  // How often the daemon stamps its heartbeat into every client segment.
  uint32_t heartbeat_interval_ms = 500;

  // Ready tensors of the same kind are fused up to this many bytes; 0
  // disables fusion.
  uint64_t fusion_threshold_bytes = 64ull << 20;
  // Data arena of a client that does not ask for a size, and the largest one
  // a client may ask for.
  uint64_t default_arena_bytes = 256ull << 20;
  uint64_t max_arena_bytes = 16ull << 30;
  uint64_t memory_budget_bytes = 0;  // 0: none
  // Size of each job's result segment.
  uint64_t result_arena_bytes = 512ull << 20;
  // Per client; also sizes its completion and submission rings.
  uint32_t max_jobs = 64;
  uint32_t max_outstanding_requests = 4096;
  uint32_t max_name_bytes = 1024;
  // Threads that share a large reduction; 0: one per online core.
  uint32_t reduce_threads = 0;
  EngineWait engine_wait = EngineWait::kAuto;
  // For this many microseconds after it ran every request its ranks had
  // submitted (and, across nodes, after any progress while another daemon
  // owes it something), the engine looks for work again without sleeping,
  // yielding its core between looks; 0: it sleeps as soon as it finds
  // nothing to do.
  uint32_t engine_spin_us = 200;

  // Multi-node: whether to join the launcher's MPI world, and how often the
  // engine looks for messages of the other daemons while it waits for them.
  MultiNode multi_node = MultiNode::kAuto;
  // Where the daemons of other nodes reach this one for the jobs they share
  // (each job's world among resident daemons listens there); empty: the
  // host name.
  std::string node_address;
  uint32_t cycle_time_ms = 1;
  // A node whose daemon sends nothing for this long is taken for dead.
  double node_timeout_seconds = 30.0;
  // Tensors remembered by the response cache of negotiation across nodes; 0
  // disables it.
  uint32_t response_cache_capacity = 1024;
  // Large collectives across nodes move in chunks of this size, the local
  // reduction of one overlapping the transfer of the one before.
  uint64_t cross_node_chunk_bytes = 4ull << 20;
  // A cached allreduce across nodes of at most this many bytes travels with
  // the negotiation (each node's part with its announcement, the combination
  // with node 0's decision) instead of through MPI afterwards; 0: never.
  uint64_t cross_node_inline_bytes = 8ull << 10;
  // Each node also sends its part of such an allreduce to the set's other
  // nodes, which combine the parts themselves as soon as all are there
  // (one hop between daemons instead of two).
  bool cross_node_peer_parts = true;

  // Autotuning (as HOROVOD_AUTOTUNE): the engine tries values of
  // fusion_threshold_bytes (and across nodes cycle_time_ms and
  // cross_node_chunk_bytes) during each job's first steps, by Bayesian
  // optimization of the measured throughput, then keeps the best.
  bool autotune = false;
  // CSV of every trial (values and score); empty: none.
  std::string autotune_log_file;
  // Samples discarded first, training steps per sample, and trials.
  uint32_t autotune_warmup_samples = 3;
  uint32_t autotune_steps_per_sample = 10;
  uint32_t autotune_bayes_opt_max_samples = 20;

  // HOST:PORT where the daemon serves its Prometheus metrics over HTTP (GET
  // /metrics); empty: only `collectivectl metrics` shows them.
  std::string metrics_listen;

  // Warn (log and collectivectl status) about tensors some ranks submitted
  // and others not after this long; 0 disables the check.
  double stall_check_seconds = 60.0;
  // Fail such tensors on every rank after this long; 0: never.
  double stall_shutdown_seconds = 0.0;

  // GPU path: a batch of CUDA tensors still not done on the GPU after this
  // long fails the job (and aborts its NCCL communicators).
  double gpu_timeout_seconds = 300.0;

  friend bool operator==(const DaemonConfig&, const DaemonConfig&) = default;
};

// kHorovodEnvironment: one of Horovod's HOROVOD_* variables
// (config/horovod_environment.h).
enum class Source { kDefault, kFile, kHorovodEnvironment, kEnvironment, kFlag };

struct EffectiveConfig {
  DaemonConfig values;
  // Knob name -> where its value came from.
  std::map<std::string, Source> sources;
  // Knob name -> the HOROVOD_* variable it came from (kHorovodEnvironment).
  std::map<std::string, std::string> horovod_variables;
  // The YAML file that was read; empty if none.
  std::string file;
};

}  // namespace collective::config
