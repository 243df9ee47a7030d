// libcollective: the C++ client of collectived.
//
// A training process connects to its node's daemon, which forms the job once
// every local rank has registered. Tensors are handed over in shared memory:
// a tensor that already lies in the client's arena (see Client::Allocate) is
// not copied at all; any other tensor is copied into the arena first. Results
// are read from the job's result segment, either copied to an output buffer
// or viewed in place.
//
//   auto client = collective::Client::Connect();   // LOCAL_RANK/LOCAL_SIZE...
//   collective::TensorView grad{data, collective::DataType::kFloat32, {1024}};
//   auto status = client.value()->Allreduce("grad", grad, data,
//                                           {.op = collective::ReduceOp::kAverage});
//
// Thread-safe: any thread may submit, wait or allocate.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "collective/types.h"

namespace collective {

namespace internal {
class ClientCore;
class Session;
}  // namespace internal

// Cancels a Client::Connect that waits for its job to form, from any thread:
// that Connect returns CANCELLED and the daemon forgets the registration (an
// elastic worker gives up a generation that a death superseded before it
// formed). Cancel before the Connect starts cancels it too; one per Connect.
class ConnectCancellation {
 public:
  void Cancel();
  bool cancelled() const;

 private:
  friend class internal::Session;
  // While registering: `cancel` runs on Cancel. False if cancelled already.
  bool Arm(std::function<void()> cancel);
  void Disarm();

  mutable std::mutex mutex_;
  bool cancelled_ = false;
  std::function<void()> cancel_;
};

struct ClientOptions {
  // Empty: $COLLECTIVE_SOCKET, else /run/collectived/collectived.sock.
  std::string socket_path;
  // Clients that register the same job id form one job. Empty:
  // $COLLECTIVE_JOB_ID, else "default".
  std::string job_id;
  // -1: from the launcher's environment (COLLECTIVE_LOCAL_RANK/_SIZE,
  // LOCAL_RANK with LOCAL_SIZE or LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_*,
  // HOROVOD_LOCAL_*, MPI_LOCALRANKID/MPI_LOCALNRANKS), else a job of one.
  int local_rank = -1;
  int local_size = -1;
  // Size of this client's shared-memory arena. 0: $COLLECTIVE_ARENA_BYTES,
  // else the daemon's default.
  uint64_t arena_bytes = 0;
  // How long to wait for the whole job to register.
  absl::Duration register_timeout = absl::Minutes(5);
  // How long to wait for the daemon to accept connections on socket_path
  // before registering (a launcher that starts the daemons and the ranks
  // together, on other machines, sets it). Negative:
  // $COLLECTIVE_CONNECT_TIMEOUT_SECONDS, else zero: a daemon that does not
  // listen fails the registration at once.
  absl::Duration connect_timeout = absl::Seconds(-1);
  // Process sets to create when the job forms (ids 1, 2, ... in this
  // order); every rank must list the same ones.
  std::vector<std::vector<int>> static_process_sets;
  // A daemon whose heartbeat is older than this is considered hung.
  absl::Duration daemon_timeout = absl::Seconds(60);
  // Null: Connect waits for the job to form until register_timeout.
  std::shared_ptr<ConnectCancellation> cancellation;
  // A timeline of this job alone (Chrome trace JSON), which the daemon of
  // global rank 0 starts as the job forms and ends with it, writing the
  // file with rank 0's permissions; Horovod's HOROVOD_TIMELINE. Empty:
  // $HOROVOD_TIMELINE (relative to the working directory; DYNAMIC: none),
  // with $HOROVOD_TIMELINE_MARK_CYCLES (non-zero: mark the engine's cycles).
  std::string timeline_file;
  bool timeline_mark_cycles = false;
  // Resident daemons (one per machine, started on their own): HOST:PORT of
  // the rendezvous through which the daemons of the job's nodes form its
  // world, and this node's place among them. Empty: $COLLECTIVE_RENDEZVOUS
  // with $COLLECTIVE_NODE/$COLLECTIVE_NODES (collectiverun), else
  // $HOROVOD_GLOO_RENDEZVOUS_ADDR:$HOROVOD_GLOO_RENDEZVOUS_PORT with
  // $HOROVOD_CROSS_RANK/$HOROVOD_CROSS_SIZE (horovodrun --gloo), else none:
  // the job spans the daemon's own world (mpirun's, or this node).
  std::string rendezvous;
  int node = -1;
  int nodes = -1;

  // Fills every field left unset from the environment. Errors name the
  // variable and what is wrong with it.
  absl::Status ResolveFromEnvironment();
};

// A tensor in memory, described but not owned.
struct TensorView {
  const void* data = nullptr;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  // Device::kCuda: `data` is CUDA device memory of this client's device (the
  // one current when it first passed a CUDA tensor). The daemon reads and
  // writes it in place through CUDA IPC, registering its allocation at first
  // use, and orders its work after what `cuda_stream` has queued so far; Wait
  // makes `cuda_stream` wait for the result, without blocking the host on
  // the GPU. Outputs of CUDA tensors are CUDA memory too.
  Device device = Device::kCpu;
  // A CUstream / cudaStream_t; null: the default stream.
  void* cuda_stream = nullptr;

  // Bytes the shape describes; fails on a negative dimension or overflow.
  absl::StatusOr<size_t> bytes() const;
};

// The global process set: every rank of the job.
inline constexpr int32_t kGlobalProcessSet = 0;

struct AllreduceOptions {
  ReduceOp op = ReduceOp::kSum;
  // Every input is multiplied by prescale before the reduction, the result
  // by postscale after it.
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t process_set = kGlobalProcessSet;
  // ReduceOp::kAdasum only.
  AdasumScope adasum_scope = AdasumScope::kRanks;
};

// Reducescatter supports kSum and kAverage.
using ReducescatterOptions = AllreduceOptions;

// A process set: a subset of the job's ranks with collectives of its own.
// Ranks within it are counted in ascending order of global rank.
struct ProcessSet {
  int32_t id = kGlobalProcessSet;
  std::vector<int> ranks;  // global ranks, ascending

  int size() const { return static_cast<int>(ranks.size()); }
  bool included(int global_rank) const;
  // The rank within the set of `global_rank`, or -1.
  int rank_of(int global_rank) const;
};

// A block of this client's shared-memory arena. Tensors placed in one are
// handed to the daemon without a copy. Freed when destroyed.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  ~Buffer();

  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  friend class Client;
  Buffer(std::shared_ptr<internal::ClientCore> core, void* data, size_t size, uint64_t offset)
      : core_(std::move(core)), data_(data), size_(size), offset_(offset) {}
  void Reset();

  std::shared_ptr<internal::ClientCore> core_;
  void* data_ = nullptr;
  size_t size_ = 0;
  uint64_t offset_ = 0;
};

// The outcome of one request. When the request named an output buffer, data()
// is that buffer; otherwise it is a read-only view of the result in shared
// memory, valid until the Result is destroyed or released. For CUDA tensors
// data() is the CUDA output, which the input's stream may read once Wait
// returned.
class Result {
 public:
  Result() = default;
  Result(Result&& other) noexcept;
  Result& operator=(Result&& other) noexcept;
  ~Result();

  const void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  DataType dtype() const { return dtype_; }
  // The result's shape: for allgather and alltoall the first dimension is
  // what this rank received; for reducescatter, its share of the rows.
  const std::vector<int64_t>& shape() const { return shape_; }
  // Alltoall: the rows received from each rank of the set, in rank order.
  const std::vector<int64_t>& received_splits() const { return received_splits_; }

  // Ends a view early; the daemon may then reuse the memory.
  void Release();

 private:
  friend class Client;
  std::shared_ptr<internal::ClientCore> core_;  // set while a view is held
  uint64_t request_id_ = 0;
  const void* data_ = nullptr;
  size_t bytes_ = 0;
  DataType dtype_ = DataType::kFloat32;
  std::vector<int64_t> shape_;
  std::vector<int64_t> received_splits_;
};

class Client {
 public:
  using Handle = uint64_t;

  // Registers with the daemon and waits until the whole job has formed.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(ClientOptions options = {});

  // Leaves the job (see Close).
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const Topology& topology() const { return topology_; }
  int rank() const { return topology_.rank; }
  int size() const { return topology_.size; }
  int local_rank() const { return topology_.local_rank; }
  int local_size() const { return topology_.local_size; }
  int cross_rank() const { return topology_.cross_rank; }
  int cross_size() const { return topology_.cross_size; }
  bool is_homogeneous() const { return topology_.is_homogeneous; }
  // Whether the daemon takes CUDA tensors: it was built with CUDA and NCCL.
  bool daemon_gpu_path() const;
  // OK when this process can hand CUDA tensors to a daemon that takes them:
  // the NVIDIA driver (libcuda.so.1) loads and has every function
  // libcollective uses. Otherwise FAILED_PRECONDITION saying what is missing.
  // Needs no connection; touches no device.
  static absl::Status CudaDriverStatus();

  // A zero-copy buffer in this client's arena. Waits while the arena is full
  // of inputs still in flight; fails if `bytes` exceeds the whole arena.
  absl::StatusOr<Buffer> Allocate(size_t bytes);
  // The same, but never waits: RESOURCE_EXHAUSTED at once when no block of
  // `bytes` is free now (for allocators that lend arena memory to a
  // framework, whose threads must not wait on other requests).
  absl::StatusOr<Buffer> TryAllocate(size_t bytes);
  // The size of this client's arena, which Buffers share with the copies of
  // inputs that lie elsewhere, and how much of it neither holds right now.
  uint64_t arena_bytes() const;
  uint64_t arena_free_bytes() const;
  // Whether the `bytes` at `data` lie in this client's arena (a Buffer, or
  // part of one): a collective then reads them where they are.
  bool InArena(const void* data, size_t bytes) const;
  // Bytes Wait has copied out of the daemon's result segment into outputs so
  // far. An allreduce whose output lies in the arena (a Buffer) adds nothing:
  // the daemon writes its result there directly.
  uint64_t copied_out_bytes() const;

  // The collectives. Each starts a request and returns its handle; Wait
  // returns its result. Names identify tensors across the ranks of a process
  // set and must not be outstanding already on this rank. Where a collective
  // takes `output`, a non-null output receives a copy of the result in Wait
  // (it may be the input, for the in-place form); a null one makes Wait
  // return a read-only view. An allreduce's output in this client's arena
  // receives the result from the daemon itself, with no copy in Wait.

  // Allreduce across the ranks of options.process_set.
  absl::StatusOr<Handle> AllreduceAsync(absl::string_view name, const TensorView& input,
                                        void* output, const AllreduceOptions& options = {});
  // AllreduceAsync followed by Wait; the result is copied into `output`.
  absl::Status Allreduce(absl::string_view name, const TensorView& input, void* output,
                         const AllreduceOptions& options = {});
  // Tensors negotiated and run together, never split across cycles.
  absl::StatusOr<std::vector<Handle>> GroupedAllreduceAsync(const std::vector<std::string>& names,
                                                            const std::vector<TensorView>& inputs,
                                                            const std::vector<void*>& outputs,
                                                            const AllreduceOptions& options = {});

  // Allgather: every rank's tensor, concatenated in rank order along the
  // first dimension (which may differ per rank). Wait returns a view whose
  // shape has the total first dimension.
  absl::StatusOr<Handle> AllgatherAsync(absl::string_view name, const TensorView& input,
                                        int32_t process_set = kGlobalProcessSet);
  // The same into `output`, which holds `output_bytes` (every rank's rows);
  // the form CUDA tensors need (their output is device memory).
  absl::StatusOr<Handle> AllgatherAsync(absl::string_view name, const TensorView& input,
                                        void* output, size_t output_bytes,
                                        int32_t process_set = kGlobalProcessSet);
  absl::StatusOr<std::vector<Handle>> GroupedAllgatherAsync(
      const std::vector<std::string>& names, const std::vector<TensorView>& inputs,
      int32_t process_set = kGlobalProcessSet);
  // The same into outputs[i], which holds output_bytes[i] (every rank's rows
  // of tensor i); the form CUDA tensors need.
  absl::StatusOr<std::vector<Handle>> GroupedAllgatherAsync(
      const std::vector<std::string>& names, const std::vector<TensorView>& inputs,
      const std::vector<void*>& outputs, const std::vector<size_t>& output_bytes,
      int32_t process_set = kGlobalProcessSet);

  // Broadcast from `root_rank` (counted within the process set). Every rank
  // passes a tensor of the same shape; inputs are never written, so pass
  // the input as output for the in-place form.
  absl::StatusOr<Handle> BroadcastAsync(absl::string_view name, const TensorView& input,
                                        void* output, int root_rank,
                                        int32_t process_set = kGlobalProcessSet);

  // Alltoall: splits[j] rows of the input (in order) go to rank j of the set;
  // without splits the first dimension is split evenly. Wait returns a view
  // of the rows received, with Result::received_splits().
  absl::StatusOr<Handle> AlltoallAsync(absl::string_view name, const TensorView& input,
                                       const std::vector<int64_t>& splits = {},
                                       int32_t process_set = kGlobalProcessSet);
  // The same into `output`, which holds `output_bytes` (the rows this rank
  // receives); the form CUDA tensors need.
  absl::StatusOr<Handle> AlltoallAsync(absl::string_view name, const TensorView& input,
                                       const std::vector<int64_t>& splits, void* output,
                                       size_t output_bytes,
                                       int32_t process_set = kGlobalProcessSet);

  // Reducescatter: the sum (or average) over ranks, of which rank r receives
  // its block of rows; with an uneven first dimension the first (dim0 mod
  // size) ranks get one row more. `output` needs room for this rank's rows.
  absl::StatusOr<Handle> ReducescatterAsync(absl::string_view name, const TensorView& input,
                                            void* output, const ReducescatterOptions& options = {});
  absl::StatusOr<std::vector<Handle>> GroupedReducescatterAsync(
      const std::vector<std::string>& names, const std::vector<TensorView>& inputs,
      const std::vector<void*>& outputs, const ReducescatterOptions& options = {});

  // Rooted collectives (client_rooted.cc); `root_rank` counts within the
  // process set. Their results are empty on the ranks that receive nothing.
  // CUDA tensors work on one node as the collectives' do (results written
  // on the device; a CUDA reduce without output reduces in place); a CUDA
  // gather's root and a CUDA scatter's receivers need an output.
  //
  // Reduce: every rank's input reduced as allreduce reduces it (any op but
  // Adasum, prescale and postscale), the result at the root only. `output`
  // (only the root's is used; null elsewhere) receives it, and may be the
  // input; a root output in this client's arena (a Buffer) receives it from
  // the daemon itself.
  absl::StatusOr<Handle> ReduceAsync(absl::string_view name, const TensorView& input, void* output,
                                     int root_rank, const AllreduceOptions& options = {});
  // Gather: every rank's rows (their number may differ per rank),
  // concatenated in rank order, at the root only. Without output, Wait's
  // result on the root is a view of the gathered rows; with one, `output`
  // holds `output_bytes` (every rank's rows).
  absl::StatusOr<Handle> GatherAsync(absl::string_view name, const TensorView& input, int root_rank,
                                     int32_t process_set = kGlobalProcessSet,
                                     void* output = nullptr, size_t output_bytes = 0);
  // Scatter: the root's input rows split among the ranks in rank order, this
  // rank receiving `receive_rows` of them (every rank's add up to the root's
  // first dimension). A non-root's input is an empty tensor (no rows) of the
  // same dtype and trailing dimensions. Without output, Wait's result is a
  // view of this rank's rows; `output` holds `output_bytes` (at least those
  // rows), and one in this client's arena receives them from the daemon
  // itself.
  absl::StatusOr<Handle> ScatterAsync(absl::string_view name, const TensorView& input,
                                      int64_t receive_rows, int root_rank,
                                      int32_t process_set = kGlobalProcessSet,
                                      void* output = nullptr, size_t output_bytes = 0);
  // Point-to-point messages (client_p2p.cc). A send to rank `dest` with
  // `tag` matches rank dest's receive from this rank with that tag (ranks
  // within the process set, tags non-negative); between two ranks the k-th
  // send of a tag matches the k-th receive of it, as in MPI. A rank may
  // send to itself. The receive names the send's dtype and byte size (its
  // shape may differ), else both fail. Only the two ranks take part. Both
  // complete once the bytes are in the receiver's result; a send's result
  // is empty. CPU tensors between any two ranks; CUDA tensors between ranks
  // of one node (the daemon copies on a device, or NCCL moves the bytes
  // between two; between nodes a CUDA message fails with UNIMPLEMENTED).
  absl::StatusOr<Handle> SendAsync(const TensorView& input, int dest, int tag,
                                   int32_t process_set = kGlobalProcessSet);
  // `like` gives the dtype and shape received (its data is not read).
  // Without `output`, Wait returns a view of the bytes received; with one
  // (holding `output_bytes`), they are copied there — by the daemon itself
  // when it lies in this client's arena. A CUDA `like` receives into device
  // memory: `output`, else `like`'s own data, ordered on its stream as the
  // collectives' outputs are.
  absl::StatusOr<Handle> RecvAsync(const TensorView& like, int source, int tag,
                                   int32_t process_set = kGlobalProcessSet, void* output = nullptr,
                                   size_t output_bytes = 0);
  // The blocking forms: SendAsync or RecvAsync, then Wait.
  absl::Status Send(const TensorView& input, int dest, int tag,
                    int32_t process_set = kGlobalProcessSet);
  absl::StatusOr<Result> Recv(const TensorView& like, int source, int tag,
                              int32_t process_set = kGlobalProcessSet, void* output = nullptr,
                              size_t output_bytes = 0);

  // Returns once every rank of the set has reached the barrier.
  absl::Status Barrier(int32_t process_set = kGlobalProcessSet);

  // Horovod's join: this rank has no more data. Until every rank of the set
  // has joined, the others' allreduces go on with zeros from this rank
  // (averages still divide by the full size) and their other collectives
  // fail. Returns the last rank to join (counted within the set).
  absl::StatusOr<int> Join(int32_t process_set = kGlobalProcessSet);

  // Process sets. Adding and removing are collectives of the global set:
  // every rank must ask for the same change.
  absl::StatusOr<ProcessSet> AddProcessSet(std::vector<int> ranks);
  absl::Status RemoveProcessSet(int32_t id);
  // The sets this client knows, the global one included.
  std::vector<ProcessSet> ProcessSets() const;
  // This rank within a set, the set's size, whether this rank is in it.
  absl::StatusOr<int> ProcessSetRank(int32_t id) const;
  absl::StatusOr<int> ProcessSetSize(int32_t id) const;
  absl::StatusOr<bool> ProcessSetIncluded(int32_t id) const;

  // CUDA memory. A CUDA tensor's allocation (its cudaMalloc'd block, found
  // through the driver) is registered with the daemon at its first use; this
  // registers it ahead of time and reports at once whether the daemon can
  // map it. Unregister an allocation before freeing it back to the device.
  absl::Status RegisterDeviceMemory(const void* device_pointer);
  absl::Status UnregisterDeviceMemory(const void* device_pointer);

  // The timeline of this client's job alone (Chrome trace JSON), written to
  // `path` with this process's own file permissions; it ends with the job
  // if not stopped before. One per job: any rank of the job may stop it.
  absl::Status StartTimeline(const std::string& path, bool mark_cycles = false);
  absl::Status StopTimeline();

  // True when Wait(handle) would not block.
  bool Poll(Handle handle);

  // Waits for a request and returns its result, or the error every rank of
  // the collective received. Each handle can be waited for once.
  absl::StatusOr<Result> Wait(Handle handle, absl::Duration timeout = absl::InfiniteDuration());

  // Leaves the job: the daemon tells the other ranks when they submit work
  // that can no longer complete. Idempotent.
  absl::Status Close();

 private:
  Client(std::shared_ptr<internal::ClientCore> core, Topology topology)
      : core_(std::move(core)), topology_(topology) {}
  // InvalidArgument unless this rank is in the set.
  absl::Status CheckMember(int32_t process_set) const;

  std::shared_ptr<internal::ClientCore> core_;
  Topology topology_;
  std::atomic<uint64_t> copied_out_bytes_{0};
};

}  // namespace collective
