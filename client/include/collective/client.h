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

#include <cstddef>
#include <cstdint>
#include <memory>
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
}  // namespace internal

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
  // A daemon whose heartbeat is older than this is considered hung.
  absl::Duration daemon_timeout = absl::Seconds(60);

  // Fills every field left unset from the environment. Errors name the
  // variable and what is wrong with it.
  absl::Status ResolveFromEnvironment();
};

// A tensor in memory, described but not owned.
struct TensorView {
  const void* data = nullptr;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;

  // Bytes the shape describes; fails on a negative dimension or overflow.
  absl::StatusOr<size_t> bytes() const;
};

struct AllreduceOptions {
  ReduceOp op = ReduceOp::kSum;
  // Every input is multiplied by prescale before the reduction, the result
  // by postscale after it.
  double prescale = 1.0;
  double postscale = 1.0;
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
// memory, valid until the Result is destroyed or released.
class Result {
 public:
  Result() = default;
  Result(Result&& other) noexcept;
  Result& operator=(Result&& other) noexcept;
  ~Result();

  const void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  DataType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }

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

  // A zero-copy buffer in this client's arena. Waits while the arena is full
  // of inputs still in flight; fails if `bytes` exceeds the whole arena.
  absl::StatusOr<Buffer> Allocate(size_t bytes);

  // Starts an allreduce of `input` across every rank of the job. The name
  // identifies the tensor across ranks and must not be outstanding already.
  // If `output` is not null the result is copied there by Wait (it may be
  // input.data, for an in-place allreduce); otherwise Wait returns a view.
  absl::StatusOr<Handle> AllreduceAsync(absl::string_view name, const TensorView& input,
                                        void* output, const AllreduceOptions& options = {});

  // AllreduceAsync followed by Wait; the result is copied into `output`.
  absl::Status Allreduce(absl::string_view name, const TensorView& input, void* output,
                         const AllreduceOptions& options = {});

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

  std::shared_ptr<internal::ClientCore> core_;
  Topology topology_;
};

}  // namespace collective
