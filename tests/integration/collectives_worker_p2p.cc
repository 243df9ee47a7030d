// The point-to-point scenarios: sends and receives between real client
// processes, each result checked bitwise against the sender's deterministic
// data (RankData of the message's name and the sender's rank).
//
//   p2p-ring [--big-bytes N]  every rank sends to the next and receives from
//                             the one before: every dtype x size, outputs
//                             viewed, copied and in the arena
//   p2p-order                 several messages of one tag and interleaved
//                             tags, received in another tag order
//   p2p-self                  a rank sends to itself, either half first
//   p2p-mismatch --kind bytes|dtype   rank 1 receives rank 0's send wrongly:
//                             both fail; then a right pair works
//   p2p-dead-peer             rank 0 waits to receive from rank 1, which dies
//   p2p-pending --go FILE     rank 0's receive from rank 1 waits (both
//                             say "pending", rank 1 once status shows it)
//                             until the test creates FILE
//   p2p-beside-allreduce      messages pending across an allreduce, and
//                             ranks 0 and 1 exchanging while the others run
//                             allreduces in a set of their own
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "tests/integration/collectives_worker.h"

namespace collective::testing {
namespace {

// A message: name (its data's seed), dtype and element count.
struct Message {
  std::string name;
  v1::DataType dtype = v1::DATA_TYPE_FLOAT32;
  size_t count = 0;
};

TensorView ViewOf(const std::vector<std::byte>& data, const Message& message) {
  return TensorView{
      data.data(), static_cast<DataType>(message.dtype), {static_cast<int64_t>(message.count)}};
}

// Where the receiver puts what arrives.
enum class Into { kView, kPrivate, kArena };

// A receive in flight and what it must hold.
struct Receiving {
  Message message;
  int source = 0;
  Client::Handle handle = 0;
  std::vector<std::byte> output;  // kPrivate
  Buffer buffer;                  // kArena
  Into into = Into::kView;
};

Client::Handle SendOrDie(Client& client, const Message& message, int dest, int tag,
                         std::vector<std::vector<std::byte>>& keep, bool arena = false,
                         std::vector<Buffer>* buffers = nullptr) {
  std::vector<std::byte> data = RankData(message.name, client.rank(), message.dtype, message.count);
  TensorView view = ViewOf(data, message);
  if (arena && !data.empty()) {
    Buffer buffer = ValueOrDie(client.Allocate(data.size()), "allocate a send buffer");
    std::memcpy(buffer.data(), data.data(), data.size());
    view.data = buffer.data();
    buffers->push_back(std::move(buffer));
  }
  const Client::Handle handle =
      ValueOrDie(client.SendAsync(view, dest, tag), absl::StrCat("send '", message.name, "'"));
  keep.push_back(std::move(data));
  return handle;
}

Receiving RecvOrDie(Client& client, const Message& message, int source, int tag, Into into) {
  Receiving r{.message = message, .source = source, .into = into};
  const size_t bytes = message.count * ElementSize(message.dtype);
  TensorView like{
      nullptr, static_cast<DataType>(message.dtype), {static_cast<int64_t>(message.count)}};
  void* output = nullptr;
  if (into == Into::kPrivate) {
    r.output.assign(bytes, std::byte{0x5a});
    output = r.output.data();
  } else if (into == Into::kArena && bytes > 0) {
    r.buffer = ValueOrDie(client.Allocate(bytes), "allocate a receive buffer");
    std::memset(r.buffer.data(), 0x5a, bytes);
    output = r.buffer.data();
  }
  r.handle = ValueOrDie(client.RecvAsync(like, source, tag, kGlobalProcessSet, output, bytes),
                        absl::StrCat("receive '", message.name, "'"));
  return r;
}

void CheckReceived(Client& client, Receiving& r) {
  const uint64_t copied_before = client.copied_out_bytes();
  Result result = ValueOrDie(client.Wait(r.handle),
                             absl::StrCat("wait for '", r.message.name, "' from rank ", r.source));
  const std::vector<std::byte> expected =
      RankData(r.message.name, r.source, r.message.dtype, r.message.count);
  if (result.bytes() != expected.size()) {
    Die(absl::StrCat("'", r.message.name, "' has ", result.bytes(), " bytes, not ",
                     expected.size()));
  }
  if (result.shape() != std::vector<int64_t>{static_cast<int64_t>(r.message.count)}) {
    Die(absl::StrCat("'", r.message.name, "' came back with another shape"));
  }
  const void* data = result.data();
  if (r.into == Into::kPrivate && !expected.empty() && data != r.output.data()) {
    Die("the result is not the output");
  }
  if (r.into == Into::kArena && !expected.empty() && data != r.buffer.data()) {
    Die("the result is not the arena output");
  }
  // An output in the arena receives the bytes from the daemon itself.
  if (r.into == Into::kArena && client.copied_out_bytes() != copied_before) {
    Die(absl::StrCat("'", r.message.name, "' was copied out of the result segment"));
  }
  if (!expected.empty() && std::memcmp(data, expected.data(), expected.size()) != 0) {
    Die(absl::StrCat("'", r.message.name, "' from rank ", r.source,
                     " does not hold the sender's data"));
  }
}

void WaitSent(Client& client, Client::Handle handle, const std::string& what) {
  Result result = ValueOrDie(client.Wait(handle), what);
  if (result.bytes() != 0) Die(absl::StrCat(what, ": a send's result is not empty"));
}

// The error a wait must end with.
std::string FailureOf(Client& client, Client::Handle handle, const std::string& what) {
  absl::StatusOr<Result> result = client.Wait(handle);
  if (result.ok()) Die(absl::StrCat(what, " succeeded but must fail"));
  return absl::StrCat(absl::StatusCodeToString(result.status().code()), ": ",
                      result.status().message());
}

// Ends a scenario: a rank that leaves ends the job for the others, so
// every rank waits for the rest first.
void Done(Client& client, const char* what, int cases) {
  OkOrDie(client.Barrier(), "the final barrier");
  Say(absl::StrCat("ok ", cases, " ", what, " cases on rank ", client.rank(), " of ",
                   client.size()));
}

}  // namespace

int P2pRing(const Args& args) {
  auto client = ConnectOrDie(args);
  const int size = client->size();
  const int next = (client->rank() + 1) % size;
  const int previous = (client->rank() + size - 1) % size;
  const size_t big_bytes = std::stoull(Flag(args, "--big-bytes", "65536"));
  int cases = 0;
  for (v1::DataType dtype : AllDataTypes()) {
    for (size_t count : MatrixCounts(dtype, big_bytes)) {
      for (Into into : {Into::kView, Into::kPrivate, Into::kArena}) {
        const bool arena_input = into == Into::kArena;
        const Message message{
            absl::StrCat("ring.", DataTypeName(dtype), ".", count, ".", static_cast<int>(into)),
            dtype, count};
        std::vector<std::vector<std::byte>> keep;
        std::vector<Buffer> buffers;
        // Receive first on odd ranks, send first on even ones: either order
        // must work, and neither blocks.
        Receiving r;
        Client::Handle sent = 0;
        if (client->rank() % 2 == 1) {
          r = RecvOrDie(*client, message, previous, cases, into);
          sent = SendOrDie(*client, message, next, cases, keep, arena_input, &buffers);
        } else {
          sent = SendOrDie(*client, message, next, cases, keep, arena_input, &buffers);
          r = RecvOrDie(*client, message, previous, cases, into);
        }
        CheckReceived(*client, r);
        WaitSent(*client, sent, message.name);
        ++cases;
      }
    }
  }
  // The blocking forms around the ring: even ranks send first, odd ones
  // receive first, so every blocked send has its receive coming (with an odd
  // size, the last rank's send to rank 0 waits until rank 0's own send
  // returned).
  const Message blocking{"ring.blocking", v1::DATA_TYPE_INT64, 33};
  const std::vector<std::byte> mine = RankData(blocking.name, client->rank(), blocking.dtype, 33);
  std::vector<std::byte> got(mine.size());
  const TensorView like{nullptr, DataType::kInt64, {33}};
  const auto exchange_receive = [&] {
    OkOrDie(client->Recv(like, previous, 1000, kGlobalProcessSet, got.data(), got.size()).status(),
            "blocking receive");
  };
  if (size > 1 && client->rank() % 2 == 0) {
    OkOrDie(client->Send(ViewOf(mine, blocking), next, 1000), "blocking send");
    exchange_receive();
  } else if (size > 1) {
    exchange_receive();
    OkOrDie(client->Send(ViewOf(mine, blocking), next, 1000), "blocking send");
  }
  if (size > 1 && got != RankData(blocking.name, previous, blocking.dtype, 33)) {
    Die("the blocking receive does not hold the sender's data");
  }
  Done(*client, "p2p-ring", cases);
  return 0;
}

int P2pOrder(const Args& args) {
  auto client = ConnectOrDie(args);
  const int size = client->size();
  const int next = (client->rank() + 1) % size;
  const int previous = (client->rank() + size - 1) % size;
  // Sends of tags 1, 2, 1, 1, 2, 1 (message i carries seed "order.i");
  // receives post every tag-2 message first, then the tag-1 ones. The k-th
  // receive of a tag must get the k-th send of that tag.
  const std::vector<int> tags = {1, 2, 1, 1, 2, 1};
  std::vector<std::vector<std::byte>> keep;
  std::vector<Client::Handle> sent;
  for (size_t i = 0; i < tags.size(); ++i) {
    sent.push_back(SendOrDie(*client, {absl::StrCat("order.", i), v1::DATA_TYPE_FLOAT32, 5 + i},
                             next, tags[i], keep));
  }
  std::vector<Receiving> receiving;
  for (int tag : {2, 1}) {
    for (size_t i = 0; i < tags.size(); ++i) {
      if (tags[i] != tag) continue;
      receiving.push_back(RecvOrDie(*client,
                                    {absl::StrCat("order.", i), v1::DATA_TYPE_FLOAT32, 5 + i},
                                    previous, tag, Into::kView));
    }
  }
  // Wait in reverse: completion does not depend on the order of waits.
  for (auto it = receiving.rbegin(); it != receiving.rend(); ++it) CheckReceived(*client, *it);
  for (Client::Handle handle : sent) WaitSent(*client, handle, "ordered send");
  Done(*client, "p2p-order", static_cast<int>(tags.size()));
  return 0;
}

int P2pSelf(const Args& args) {
  auto client = ConnectOrDie(args);
  const int me = client->rank();
  std::vector<std::vector<std::byte>> keep;
  int cases = 0;
  for (bool receive_first : {true, false}) {
    for (Into into : {Into::kView, Into::kPrivate, Into::kArena}) {
      const Message message{absl::StrCat("self.", receive_first, ".", static_cast<int>(into)),
                            v1::DATA_TYPE_FLOAT64, 1000};
      Receiving r;
      Client::Handle sent = 0;
      if (receive_first) {
        r = RecvOrDie(*client, message, me, 7, into);
        sent = SendOrDie(*client, message, me, 7, keep);
      } else {
        sent = SendOrDie(*client, message, me, 7, keep);
        r = RecvOrDie(*client, message, me, 7, into);
      }
      CheckReceived(*client, r);
      WaitSent(*client, sent, message.name);
      ++cases;
    }
  }
  Done(*client, "p2p-self", cases);
  return 0;
}

int P2pMismatch(const Args& args) {
  auto client = ConnectOrDie(args);
  const std::string kind = Flag(args, "--kind", "bytes");
  std::vector<std::vector<std::byte>> keep;
  const Message sent{"mismatch", v1::DATA_TYPE_FLOAT32, 4};
  Message received = sent;
  if (kind == "bytes") {
    received.count = 8;
  } else if (kind == "dtype") {
    received.dtype = v1::DATA_TYPE_INT32;
  } else {
    Die("--kind is bytes or dtype");
  }
  if (client->rank() == 0) {
    const Client::Handle handle = SendOrDie(*client, sent, 1, 3, keep);
    Say(absl::StrCat("error: ", FailureOf(*client, handle, "the mismatched send")));
  } else if (client->rank() == 1) {
    Receiving r = RecvOrDie(*client, received, 0, 3, Into::kView);
    Say(absl::StrCat("error: ", FailureOf(*client, r.handle, "the mismatched receive")));
  }
  // The job goes on: a right pair of the same tag works.
  if (client->rank() == 0) {
    WaitSent(*client, SendOrDie(*client, sent, 1, 3, keep), "the send after the mismatch");
  } else if (client->rank() == 1) {
    Receiving r = RecvOrDie(*client, sent, 0, 3, Into::kPrivate);
    CheckReceived(*client, r);
  }
  Done(*client, "p2p-mismatch", 1);
  return 0;
}

int P2pDeadPeer(const Args& args) {
  auto client = ConnectOrDie(args);
  if (client->rank() == 0) {
    Receiving r = RecvOrDie(*client, {"never", v1::DATA_TYPE_FLOAT32, 4}, 1, 0, Into::kView);
    Say(absl::StrCat("error: ", FailureOf(*client, r.handle, "the receive from a dead rank")));
    return 0;
  }
  if (client->rank() == 1) {
    // Dies once rank 0's receive waits for it (status says who waits for
    // whom), without leaving the job.
    AwaitDaemon(
        [](const v1::StatusResponse& status) {
          for (const v1::PendingMessage& message : status.pending_messages()) {
            if (message.rank() == 0 && message.peer_rank() == 1 &&
                message.collective() == v1::COLLECTIVE_RECV) {
              return true;
            }
          }
          return false;
        },
        "rank 0 waits to receive from rank 1");
    Say("dying");
    ::_exit(0);
  }
  // The other ranks hear that the job failed on their next request.
  absl::Status barrier = client->Barrier();
  if (barrier.ok()) Die("a barrier with a dead rank succeeded");
  return 0;
}

int P2pPending(const Args& args) {
  auto client = ConnectOrDie(args);
  const std::string go = Flag(args, "--go", "");
  if (go.empty()) Die("p2p-pending needs --go FILE");
  const Message message{"pending", v1::DATA_TYPE_FLOAT32, 4};
  std::vector<std::vector<std::byte>> keep;
  if (client->rank() == 0) {
    Receiving r = RecvOrDie(*client, message, 1, 5, Into::kView);
    Say("pending");  // posted; rank 1 says it once the daemon shows it
    CheckReceived(*client, r);
  } else if (client->rank() == 1) {
    AwaitDaemon(
        [](const v1::StatusResponse& status) { return status.pending_messages_size() == 1; },
        "rank 0's receive waits");
    Say("pending");
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (!std::filesystem::exists(go)) {
      if (absl::Now() > deadline) Die("the test never created " + go);
      PauseBeforeNextPoll();
    }
    WaitSent(*client, SendOrDie(*client, message, 0, 5, keep), "the send");
  }
  Done(*client, "p2p-pending", 1);
  return 0;
}

int P2pBesideAllreduce(const Args& args) {
  auto client = ConnectOrDie(args);
  const int size = client->size();
  std::vector<std::vector<std::byte>> keep;
  // Rank 0's send to rank 1 waits while every rank runs an allreduce: a
  // pending message holds up no collective.
  const Message early{"early", v1::DATA_TYPE_INT32, 16};
  Client::Handle early_send = 0;
  if (client->rank() == 0) early_send = SendOrDie(*client, early, 1, 0, keep);
  if (client->rank() == 1) {
    AwaitDaemon(
        [](const v1::StatusResponse& status) { return status.pending_messages_size() == 1; },
        "rank 0's send waits");
  }
  std::vector<float> ones(64, 1.0f), sum(64);
  OkOrDie(
      client->Allreduce("beside", TensorView{ones.data(), DataType::kFloat32, {64}}, sum.data()),
      "allreduce beside a pending send");
  if (sum[0] != static_cast<float>(size)) Die("the allreduce beside a pending send is wrong");
  if (client->rank() == 1) {
    Receiving r = RecvOrDie(*client, early, 0, 0, Into::kView);
    CheckReceived(*client, r);
  }
  if (client->rank() == 0) WaitSent(*client, early_send, "the early send");

  // Ranks 0 and 1 play ping-pong while the others run allreduces in a set
  // of their own.
  std::vector<int> others;
  for (int rank = 2; rank < size; ++rank) others.push_back(rank);
  int32_t others_set = -1;
  if (!others.empty()) {
    others_set = ValueOrDie(client->AddProcessSet(others), "add the set of ranks 2..").id;
  }
  constexpr int kRounds = 20;
  for (int round = 0; round < kRounds; ++round) {
    const Message ping{absl::StrCat("ping.", round), v1::DATA_TYPE_UINT8,
                       100 + static_cast<size_t>(round)};
    if (client->rank() == 0) {
      WaitSent(*client, SendOrDie(*client, ping, 1, round, keep), "ping");
      Receiving r = RecvOrDie(*client, ping, 1, round, Into::kPrivate);
      CheckReceived(*client, r);
    } else if (client->rank() == 1) {
      Receiving r = RecvOrDie(*client, ping, 0, round, Into::kView);
      CheckReceived(*client, r);
      WaitSent(*client, SendOrDie(*client, ping, 0, round, keep), "pong");
    } else {
      AllreduceOptions options;
      options.process_set = others_set;
      OkOrDie(
          client->Allreduce(absl::StrCat("others.", round),
                            TensorView{ones.data(), DataType::kFloat32, {64}}, sum.data(), options),
          "allreduce of the other ranks");
      if (sum[0] != static_cast<float>(others.size())) Die("the others' allreduce is wrong");
    }
  }
  Done(*client, "p2p-beside-allreduce", kRounds + 1);
  return 0;
}

}  // namespace collective::testing
