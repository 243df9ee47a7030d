// Writes the seed corpus of every fuzz target of this folder
// (tests/fuzz/corpus/<target>/) from valid messages: what a well-behaved
// client sends, in each target's input form (fuzz_input.h), so that the
// fuzzers start from inputs that pass the parsers and go deep. Run by
// `make fuzz-corpus`; the files are checked in.
//   fuzz-seed-corpus DIR
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <google/protobuf/text_format.h>

#include "collective/v1/collective.pb.h"
#include "shm/segment_layout.h"
#include "shm/submission_ring.h"
#include "tests/fuzz/cuda_world.h"
#include "tests/fuzz/fuzz_input.h"

namespace collective::fuzz {
namespace {

// A message written as text (seeds read best as what they say).
v1::ClientMessage Parse(const std::string& text) {
  v1::ClientMessage message;
  if (!google::protobuf::TextFormat::ParseFromString(text, &message)) std::abort();
  return message;
}

// One message of every kind of host request a client submits.
v1::ClientMessage HostRequests() {
  return Parse(R"pb(
    submit {
      requests {
        request_id: 1
        name: "grad.0"
        collective: COLLECTIVE_ALLREDUCE
        op: REDUCE_OP_AVERAGE
        dtype: DATA_TYPE_FLOAT32
        shape: [ 4, 2 ]
        offset: 0
        length: 32
        prescale: 0.5
      }
      requests {
        request_id: 2
        name: "gather"
        collective: COLLECTIVE_ALLGATHER
        dtype: DATA_TYPE_FLOAT32
        shape: [ 3, 2 ]
        offset: 64
        length: 24
      }
      requests {
        request_id: 3
        name: "a2a"
        collective: COLLECTIVE_ALLTOALL
        dtype: DATA_TYPE_FLOAT32
        shape: [ 4, 1 ]
        offset: 128
        length: 16
        splits: [ 1, 3 ]
      }
      requests {
        request_id: 4
        name: "params"
        collective: COLLECTIVE_BROADCAST
        process_set_id: 1
        dtype: DATA_TYPE_FLOAT32
        shape: [ 8 ]
        offset: 192
        length: 32
        root_rank: 1
      }
      requests {
        request_id: 5
        name: "rs"
        collective: COLLECTIVE_REDUCESCATTER
        op: REDUCE_OP_SUM
        dtype: DATA_TYPE_FLOAT32
        shape: [ 4 ]
        offset: 256
        length: 16
        group_id: 9
        group_size: 1
      }
    }
    released: 7
  )pb");
}

v1::ClientMessage ControlRequests() {
  return Parse(R"pb(
    submit {
      requests { request_id: 10 name: "barrier" collective: COLLECTIVE_BARRIER }
      requests { request_id: 11 name: "join" collective: COLLECTIVE_JOIN }
      requests {
        request_id: 12
        name: "add_set"
        collective: COLLECTIVE_ADD_PROCESS_SET
        process_set_ranks: [ 0, 2 ]
      }
      requests {
        request_id: 13
        name: "remove_set"
        collective: COLLECTIVE_REMOVE_PROCESS_SET
        target_process_set_id: 1
      }
    }
  )pb");
}

// A CUDA allreduce of 16 float32 in `allocation`, in place, on event slot
// `slot`.
v1::TensorRequest CudaAllreduce(uint64_t id, uint64_t allocation, uint32_t slot) {
  v1::ClientMessage message = Parse(R"pb(
    submit {
      requests {
        name: "cuda.grad"
        collective: COLLECTIVE_ALLREDUCE
        op: REDUCE_OP_SUM
        dtype: DATA_TYPE_FLOAT32
        shape: [ 16 ]
        length: 64
        memory: MEMORY_KIND_CUDA
        device_input { bytes: 64 }
        device_output { bytes: 64 }
      }
    }
  )pb");
  v1::TensorRequest request = message.submit().requests(0);
  request.set_request_id(id);
  request.mutable_device_input()->set_allocation_id(allocation);
  request.mutable_device_output()->set_allocation_id(allocation);
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
  std::atomic<uint32_t> doorbell{0};  // never rung: nothing sleeps on it here
  shm::SubmissionWriter writer(header.get(), ring.data(), kRingBytes, &doorbell);
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
