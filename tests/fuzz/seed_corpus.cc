// Writes the seed corpus of every fuzz target of this folder
// (tests/fuzz/corpus/<target>/) from valid messages: what a well-behaved
// client sends, in each target's input form (fuzz_input.h), so that the
// fuzzers start from inputs that pass the parsers and go deep. Run by
// `make fuzz-corpus`; the files are checked in.
//   fuzz-seed-corpus DIR
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "collective/v1/collective.pb.h"
#include "shm/segment_layout.h"
#include "shm/submission_ring.h"
#include "tests/fuzz/cuda_world.h"
#include "tests/fuzz/fuzz_input.h"

namespace collective::fuzz {
namespace {

v1::TensorRequest Data(uint64_t id, const std::string& name, v1::Collective collective,
                       std::vector<int64_t> shape, uint64_t offset) {
  v1::TensorRequest request;
  request.set_request_id(id);
  request.set_name(name);
  request.set_collective(collective);
  request.set_dtype(v1::DATA_TYPE_FLOAT32);
  uint64_t elements = 1;
  for (int64_t dim : shape) {
    request.add_shape(dim);
    elements *= static_cast<uint64_t>(dim);
  }
  request.set_offset(offset);
  request.set_length(elements * 4);
  return request;
}

v1::TensorRequest Control(uint64_t id, const std::string& name, v1::Collective collective) {
  v1::TensorRequest request;
  request.set_request_id(id);
  request.set_name(name);
  request.set_collective(collective);
  return request;
}

// One message of every kind of host request a client submits.
v1::ClientMessage HostRequests() {
  v1::ClientMessage message;
  v1::Submit* submit = message.mutable_submit();
  v1::TensorRequest allreduce = Data(1, "grad.0", v1::COLLECTIVE_ALLREDUCE, {4, 2}, 0);
  allreduce.set_op(v1::REDUCE_OP_AVERAGE);
  allreduce.set_prescale(0.5);
  *submit->add_requests() = allreduce;
  *submit->add_requests() = Data(2, "gather", v1::COLLECTIVE_ALLGATHER, {3, 2}, 64);
  v1::TensorRequest alltoall = Data(3, "a2a", v1::COLLECTIVE_ALLTOALL, {4, 1}, 128);
  alltoall.add_splits(1);
  alltoall.add_splits(3);
  *submit->add_requests() = alltoall;
  v1::TensorRequest broadcast = Data(4, "params", v1::COLLECTIVE_BROADCAST, {8}, 192);
  broadcast.set_root_rank(1);
  broadcast.set_process_set_id(1);
  *submit->add_requests() = broadcast;
  v1::TensorRequest scatter = Data(5, "rs", v1::COLLECTIVE_REDUCESCATTER, {4}, 256);
  scatter.set_op(v1::REDUCE_OP_SUM);
  scatter.set_group_id(9);
  scatter.set_group_size(1);
  *submit->add_requests() = scatter;
  message.add_released(7);
  return message;
}

v1::ClientMessage ControlRequests() {
  v1::ClientMessage message;
  v1::Submit* submit = message.mutable_submit();
  *submit->add_requests() = Control(10, "barrier", v1::COLLECTIVE_BARRIER);
  *submit->add_requests() = Control(11, "join", v1::COLLECTIVE_JOIN);
  v1::TensorRequest add = Control(12, "add_set", v1::COLLECTIVE_ADD_PROCESS_SET);
  add.add_process_set_ranks(0);
  add.add_process_set_ranks(2);
  *submit->add_requests() = add;
  v1::TensorRequest remove = Control(13, "remove_set", v1::COLLECTIVE_REMOVE_PROCESS_SET);
  remove.set_target_process_set_id(1);
  *submit->add_requests() = remove;
  return message;
}

// A CUDA allreduce of 16 float32 in `allocation`, in place, on event slot
// `slot`.
v1::TensorRequest CudaAllreduce(uint64_t id, uint64_t allocation, uint32_t slot) {
  v1::TensorRequest request = Data(id, "cuda.grad", v1::COLLECTIVE_ALLREDUCE, {16}, 0);
  request.set_op(v1::REDUCE_OP_SUM);
  request.set_memory(v1::MEMORY_KIND_CUDA);
  for (v1::DeviceRange* range : {request.mutable_device_input(), request.mutable_device_output()}) {
    range->set_allocation_id(allocation);
    range->set_bytes(64);
  }
  request.set_event_slot(slot);
  request.set_event_sequence(id);
  return request;
}

// The first registration of a client on device 0 of the fuzz targets' fake
// node: two event slots, two allocations, and a request in the first.
v1::ClientMessage CudaRegistration(const CudaWorld& world) {
  v1::ClientMessage message;
  v1::RegisterCuda* cuda = message.mutable_cuda();
  cuda->set_registration_id(1);
  cuda->set_device_uuid(world.backend->Uuid(0));
  for (int slot = 0; slot < 2; ++slot) {
    cuda->add_ready_events(world.events[2 * slot]);
    cuda->add_done_events(world.events[2 * slot + 1]);
  }
  for (uint64_t id = 1; id <= 2; ++id) {
    v1::CudaAllocation* allocation = cuda->add_allocations();
    allocation->set_allocation_id(id);
    allocation->set_ipc_handle(world.allocations[id - 1].handle);
    allocation->set_bytes(world.allocations[id - 1].bytes);
  }
  *message.mutable_submit()->add_requests() = CudaAllreduce(1, 1, 0);
  return message;
}

// The next message: the second allocation unregistered, a request in it (to
// be refused) and one in the first.
v1::ClientMessage CudaFollowUp() {
  v1::ClientMessage message;
  message.mutable_cuda()->set_registration_id(2);
  message.mutable_cuda()->add_unregister(2);
  *message.mutable_submit()->add_requests() = CudaAllreduce(2, 2, 1);
  *message.mutable_submit()->add_requests() = CudaAllreduce(4, 1, 1);
  return message;
}

// The submission ring's bytes after a client pushed `messages`, from
// position `start` on, in the "image" form of submission_ring_fuzz.cc.
std::string RingImage(const std::vector<v1::ClientMessage>& messages, uint64_t start) {
  constexpr uint64_t kRingBytes = 4096;  // as the target's
  auto header = std::make_unique<shm::ClientSegmentHeader>();
  header->submit_head.store(start);
  header->submit_tail.store(start);
  std::vector<std::byte> ring(kRingBytes);
  shm::SubmissionWriter writer(header.get(), ring.data(), kRingBytes);
  for (const v1::ClientMessage& message : messages) {
    const std::string bytes = message.SerializeAsString();
    if (!writer.TryPush(bytes.data(), bytes.size())) std::abort();
  }
  const uint64_t unread = header->submit_head.load() - start;
  FuzzOutput out;
  out.Put<uint8_t>(0).Put(start).Put(unread);
  std::string image(kRingBytes, '\0');
  for (uint64_t i = 0; i < unread; ++i) {
    image[i] = static_cast<char>(ring[(start + i) & (kRingBytes - 1)]);
  }
  image.resize(unread);
  return out.PutRest(image).bytes();
}

class Corpus {
 public:
  explicit Corpus(std::filesystem::path root) : root_(std::move(root)) {}
  void Write(const std::string& target, const std::string& name, const std::string& bytes) {
    const std::filesystem::path dir = root_ / target;
    std::filesystem::create_directories(dir);
    std::ofstream(dir / name, std::ios::binary) << bytes;
  }

 private:
  std::filesystem::path root_;
};

void WriteAll(Corpus& corpus) {
  const v1::ClientMessage host = HostRequests();
  const v1::ClientMessage control = ControlRequests();
  const CudaWorld world = MakeCudaWorld();
  const v1::ClientMessage cuda = CudaRegistration(world);

  corpus.Write("submission_ring", "two_records", RingImage({host, control}, 0));
  // Starts near the end of the ring: the writer pads and wraps.
  corpus.Write("submission_ring", "wrapped", RingImage({host, control}, 4096 - 200));
  FuzzOutput round_trip;
  round_trip.Put<uint8_t>(1).Put<uint64_t>(4000);
  round_trip.Put<uint8_t>(0).PutBlob(host.SerializeAsString());
  round_trip.Put<uint8_t>(0).PutBlob(control.SerializeAsString());
  round_trip.Put<uint8_t>(1);
  round_trip.Put<uint8_t>(0).PutBlob(cuda.SerializeAsString());
  corpus.Write("submission_ring", "round_trip", round_trip.bytes());

  auto validator_input = [](uint8_t flags, const v1::ClientMessage& message) {
    FuzzOutput out;
    out.Put(flags).Put<uint16_t>(1024).Put<uint32_t>(1 << 20);
    return out.PutRest(message.SerializeAsString()).bytes();
  };
  corpus.Write("request_validator", "host", validator_input(0, host));
  corpus.Write("request_validator", "control", validator_input(0, control));
  corpus.Write("request_validator", "cuda", validator_input(1, cuda));

  FuzzOutput registration;
  registration.Put<uint8_t>(0).PutBlob(cuda.SerializeAsString());
  registration.Put<uint8_t>(0).PutBlob(CudaFollowUp().SerializeAsString());
  registration.Put<uint8_t>(1).PutBlob(cuda.SerializeAsString());
  corpus.Write("cuda_registration", "register_and_submit", registration.bytes());

  // Publish texts of each width, take them, then lie about the text tail.
  FuzzOutput honest;
  for (uint8_t width = 0; width < 4; ++width) {
    honest.Put<uint8_t>(0).Put<uint16_t>(100 + 3000 * width).Put(width);
  }
  for (int i = 0; i < 4; ++i) honest.Put<uint8_t>(2);
  corpus.Write("segment_header", "honest", honest.bytes());
  FuzzOutput lying;
  lying.Put<uint8_t>(0).Put<uint16_t>(40).Put<uint8_t>(1);
  lying.Put<uint8_t>(1).Put<uint64_t>(~uint64_t{0});
  lying.Put<uint8_t>(0).Put<uint16_t>(9000).Put<uint8_t>(3);
  lying.Put<uint8_t>(3).Put<uint32_t>(1);
  lying.Put<uint8_t>(2).Put<uint8_t>(2);
  corpus.Write("segment_header", "lying_tail", lying.bytes());
}

}  // namespace
}  // namespace collective::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  collective::fuzz::Corpus corpus(argv[1]);
  collective::fuzz::WriteAll(corpus);
  return 0;
}
