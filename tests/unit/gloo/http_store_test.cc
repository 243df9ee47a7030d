// HttpStore (daemon/gloo/http_store.h) against collectiverun's
// RendezvousServer (client/launcher/rendezvous_server.h), in-process on
// loopback; and the server against hostile raw TCP clients.
//
// horovod is not installed in the build, so its own server is not started
// here. The protocol was checked against its source, as
// common/rendezvous_protocol.h lists, and once by hand: HttpStore against
// horovod's RendezvousServer (http_server.py run from a checkout, with
// RendezvousServer.init given three ranks) stored 0-byte and 1 MB values and
// odd keys, timed out naming the missing key, formed a three-rank Gloo
// context in scope "global" and saw it cleared by three DELETEs.
#include "daemon/gloo/http_store.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "client/launcher/rendezvous_server.h"

namespace collective::daemon::gloo {
namespace {

using launcher::RendezvousServer;
using launcher::RendezvousServerOptions;
using std::chrono::milliseconds;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// The most any one check may take: far above what it needs, a bound only.
constexpr milliseconds kPatience{10000};

std::vector<char> Bytes(absl::string_view text) { return {text.begin(), text.end()}; }

Clock::time_point Within(milliseconds timeout) { return Clock::now() + timeout; }

std::unique_ptr<RendezvousServer> StartServer(RendezvousServerOptions options = {}) {
  options.address = "127.0.0.1";
  absl::StatusOr<std::unique_ptr<RendezvousServer>> server =
      RendezvousServer::Start(std::move(options));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

HttpStoreOptions StoreAt(uint16_t port, std::string scope = "global") {
  HttpStoreOptions options;
  options.host = "127.0.0.1";
  options.port = port;
  options.scope = std::move(scope);
  options.timeout = milliseconds(5000);
  return options;
}

// A port nothing listens on: a server's, once it has stopped.
uint16_t DeadPort() {
  std::unique_ptr<RendezvousServer> server = StartServer();
  return server->port();
}

// A plain TCP client that says what it is told and reads whatever comes
// back until the server closes, or kPatience passes (SO_RCVTIMEO).
class RawClient {
 public:
  explicit RawClient(uint16_t port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval patience{};
    patience.tv_sec = kPatience.count() / 1000;
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof(patience));
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  }
  ~RawClient() { close(fd_); }

  bool connected() const { return connected_; }

  void Send(absl::string_view bytes) {
    // A server that has refused may reset the connection under us.
    (void)send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  }
  void StopSending() { shutdown(fd_, SHUT_WR); }

  // Everything until the server closes; `closed` is false when kPatience
  // passed first.
  std::string ReadToClose(bool* closed) {
    std::string text;
    char chunk[4096];
    for (;;) {
      const ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
      if (n > 0) {
        text.append(chunk, static_cast<size_t>(n));
        continue;
      }
      *closed = n == 0 || errno == ECONNRESET;
      return text;
    }
  }

 private:
  int fd_;
  bool connected_ = false;
};

// What the server answers a raw client's bytes, and that it closes after.
std::string AnswerTo(uint16_t port, absl::string_view bytes, bool stop_sending = false) {
  RawClient client(port);
  EXPECT_TRUE(client.connected());
  client.Send(bytes);
  if (stop_sending) client.StopSending();
  bool closed = false;
  std::string answer = client.ReadToClose(&closed);
  EXPECT_TRUE(closed) << "the server kept the connection open after: " << answer;
  return answer;
}

class HttpStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RendezvousServerOptions options;
    options.idle_timeout = absl::Milliseconds(300);
    options.max_header_bytes = 4096;
    options.max_body_bytes = 2 << 20;
    server_ = StartServer(options);
    ASSERT_NE(server_, nullptr);
    store_ = std::make_unique<HttpStore>(StoreAt(server_->port()));
  }

  // The server still serves a proper client.
  void ExpectServing() {
    HttpStore store(StoreAt(server_->port(), "after"));
    ASSERT_TRUE(store.Set("k", Bytes("v"), Within(kPatience)).ok());
    absl::StatusOr<std::vector<char>> value = store.Get("k", Within(kPatience));
    ASSERT_TRUE(value.ok()) << value.status();
    EXPECT_EQ(*value, Bytes("v"));
  }

  std::unique_ptr<RendezvousServer> server_;
  std::unique_ptr<HttpStore> store_;
};

TEST_F(HttpStoreTest, StoresBinaryValuesOfAnySize) {
  std::vector<char> every_byte;
  for (int b = 0; b < 256; ++b) every_byte.push_back(static_cast<char>(b));
  std::vector<char> megabyte(1 << 20);
  std::mt19937 random(7);
  for (char& c : megabyte) c = static_cast<char>(random());
  megabyte[0] = '\0';

  for (const std::vector<char>& value : {std::vector<char>(), every_byte, megabyte}) {
    ASSERT_TRUE(store_->Set("key", value, Within(kPatience)).ok());
    absl::StatusOr<std::vector<char>> got = store_->Get("key", Within(kPatience));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, value);
  }
  // Through Gloo's interface too.
  store_->set("gloo", every_byte);
  EXPECT_EQ(store_->get("gloo"), every_byte);
}

TEST_F(HttpStoreTest, KeysOfAnyBytesRoundTrip) {
  const std::string odd("a/b c%2F?#&\x01\xff", 13);
  ASSERT_TRUE(store_->Set(odd, Bytes("odd"), Within(kPatience)).ok());
  ASSERT_TRUE(store_->Set("a", Bytes("plain"), Within(kPatience)).ok());
  EXPECT_EQ(*store_->Get(odd, Within(kPatience)), Bytes("odd"));
  EXPECT_EQ(*store_->Get("a", Within(kPatience)), Bytes("plain"));
  // Gloo's PrefixStore joins with '/'.
  ::gloo::rendezvous::PrefixStore prefixed("ctx/1", *store_);
  prefixed.set("0", Bytes("zero"));
  EXPECT_EQ(prefixed.get("0"), Bytes("zero"));
}

TEST_F(HttpStoreTest, WaitReturnsOnceAnotherThreadSetsTheKeys) {
  ASSERT_FALSE(store_->TryGet("late1", Within(kPatience))->has_value());
  std::future<absl::Status> waited = std::async(std::launch::async, [&] {
    return store_->Wait({"late1", "late2"}, Within(kPatience));
  });
  // It cannot finish before the keys exist, unless it failed.
  EXPECT_EQ(waited.wait_for(milliseconds(0)), std::future_status::timeout);
  std::thread setter([&] {
    HttpStore other(StoreAt(server_->port()));
    EXPECT_TRUE(other.Set("late1", Bytes("1"), Within(kPatience)).ok());
    EXPECT_TRUE(other.Set("late2", Bytes("2"), Within(kPatience)).ok());
  });
  setter.join();
  ASSERT_EQ(waited.wait_for(kPatience), std::future_status::ready);
  EXPECT_TRUE(waited.get().ok());

  // A Gloo get() waits the same way.
  std::future<std::vector<char>> got =
      std::async(std::launch::async, [&] { return store_->get("later"); });
  EXPECT_TRUE(store_->Set("later", Bytes("3"), Within(kPatience)).ok());
  ASSERT_EQ(got.wait_for(kPatience), std::future_status::ready);
  EXPECT_EQ(got.get(), Bytes("3"));
}

TEST_F(HttpStoreTest, WaitTimeoutNamesTheMissingKeysAndTheAddress) {
  ASSERT_TRUE(store_->Set("here", Bytes("x"), Within(kPatience)).ok());
  const std::string address = absl::StrCat("127.0.0.1:", server_->port());
  const Clock::time_point start = Clock::now();
  absl::Status status = store_->Wait({"here", "gone1", "gone2"}, Within(milliseconds(1000)));
  EXPECT_LT(Clock::now() - start, kPatience);
  EXPECT_TRUE(absl::IsDeadlineExceeded(status)) << status;
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr(address), HasSubstr("gone1, gone2"), Not(HasSubstr("here,"))));

  // Through Gloo: a gloo::IoException that carries the same status.
  try {
    store_->wait({"gone3"}, milliseconds(500));
    ADD_FAILURE() << "wait() returned without the key";
  } catch (const ::gloo::IoException& error) {
    const absl::Status thrown = StoreErrorStatus(error);
    EXPECT_TRUE(absl::IsDeadlineExceeded(thrown)) << thrown;
    EXPECT_THAT(thrown.message(), AllOf(HasSubstr(address), HasSubstr("gone3")));
    EXPECT_THAT(error.what(), HasSubstr("gone3"));
  }
}

// A daemon that stops cancels the waits of the worlds still forming: a wait
// for a key that never comes ends long before its hour is up.
TEST_F(HttpStoreTest, ACancelledWaitEndsAtOnce) {
  auto cancelled = std::make_shared<std::atomic<bool>>(true);
  HttpStoreOptions options = StoreAt(server_->port());
  options.cancelled = cancelled;
  HttpStore store(options);
  const Clock::time_point start = Clock::now();
  const absl::Status status = store.Wait({"never"}, Within(std::chrono::hours(1)));
  EXPECT_LT(Clock::now() - start, kPatience);
  EXPECT_TRUE(absl::IsCancelled(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("was cancelled"));
  // Not cancelled, the same store waits (and times out) as before.
  cancelled->store(false);
  EXPECT_TRUE(absl::IsDeadlineExceeded(store.Wait({"never"}, Within(milliseconds(200)))));
}

TEST(HttpStoreUnreachableTest, AnAbsentServerIsNamedWithinTheDeadline) {
  const uint16_t port = DeadPort();
  HttpStoreOptions options = StoreAt(port);
  options.timeout = milliseconds(300);
  HttpStore store(options);
  const std::string address = absl::StrCat("127.0.0.1:", port);

  Clock::time_point start = Clock::now();
  absl::Status set = store.Set("k", Bytes("v"), Within(milliseconds(300)));
  EXPECT_LT(Clock::now() - start, kPatience);
  EXPECT_TRUE(absl::IsUnavailable(set)) << set;
  EXPECT_THAT(set.message(), HasSubstr(address));

  start = Clock::now();
  absl::Status waited = store.Wait({"k"}, Within(milliseconds(300)));
  EXPECT_LT(Clock::now() - start, kPatience);
  EXPECT_TRUE(absl::IsUnavailable(waited)) << waited;
  EXPECT_THAT(waited.message(), AllOf(HasSubstr(address), HasSubstr("k not seen")));

  EXPECT_THROW(store.get("k"), ::gloo::IoException);
}

TEST_F(HttpStoreTest, ScopesAreKeptApart) {
  HttpStore local(StoreAt(server_->port(), "local_host1"));
  ASSERT_TRUE(store_->Set("0", Bytes("global"), Within(kPatience)).ok());
  ASSERT_TRUE(local.Set("0", Bytes("local"), Within(kPatience)).ok());
  ASSERT_TRUE(store_->Set("only_global", Bytes("g"), Within(kPatience)).ok());
  EXPECT_EQ(*store_->Get("0", Within(kPatience)), Bytes("global"));
  EXPECT_EQ(*local.Get("0", Within(kPatience)), Bytes("local"));
  EXPECT_FALSE(local.TryGet("only_global", Within(kPatience))->has_value());
}

TEST_F(HttpStoreTest, DeleteFinalizesAScopeOfKnownSizeAndRemovesElsewhere) {
  server_->store().SetScopeSize("global", 2);
  ASSERT_TRUE(store_->Set("addr", Bytes("a"), Within(kPatience)).ok());
  ASSERT_TRUE(store_->Delete("0", Within(kPatience)).ok());
  ASSERT_TRUE(store_->Delete("0", Within(kPatience)).ok());  // rank 0 counts once
  EXPECT_TRUE(store_->TryGet("addr", Within(kPatience))->has_value());
  ASSERT_TRUE(store_->Delete("1", Within(kPatience)).ok());
  EXPECT_FALSE(store_->TryGet("addr", Within(kPatience))->has_value());
  EXPECT_EQ(server_->store().key_count(), 0u);

  HttpStore adhoc(StoreAt(server_->port(), "adhoc"));
  ASSERT_TRUE(adhoc.Set("k", Bytes("v"), Within(kPatience)).ok());
  ASSERT_TRUE(adhoc.Set("keep", Bytes("v"), Within(kPatience)).ok());
  ASSERT_TRUE(adhoc.Delete("k", Within(kPatience)).ok());
  EXPECT_FALSE(adhoc.TryGet("k", Within(kPatience))->has_value());
  EXPECT_TRUE(adhoc.TryGet("keep", Within(kPatience))->has_value());
}

// The use it is for: Gloo contexts formed through it, ranks as threads.
TEST_F(HttpStoreTest, GlooFormsAContextThroughIt) {
  constexpr int kRanks = 3;
  std::vector<std::future<float>> sums;
  for (int rank = 0; rank < kRanks; ++rank) {
    sums.push_back(std::async(std::launch::async, [&, rank] {
      HttpStore store(StoreAt(server_->port()));
      ::gloo::transport::tcp::attr attr("127.0.0.1");
      auto device = ::gloo::transport::tcp::CreateDevice(attr);
      auto context = std::make_shared<::gloo::rendezvous::Context>(rank, kRanks);
      context->setTimeout(kPatience);
      context->connectFullMesh(store, device);
      float value = static_cast<float>(rank + 1);
      ::gloo::AllreduceOptions options(context);
      options.setOutput(&value, 1);
      options.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&::gloo::sum<float>));
      ::gloo::allreduce(options);
      return value;
    }));
  }
  for (auto& sum : sums) {
    ASSERT_EQ(sum.wait_for(kPatience * 2), std::future_status::ready);
    EXPECT_EQ(sum.get(), 6.0f);
  }
}

TEST_F(HttpStoreTest, StoreLimitsAreRefusedWithTheirReason) {
  RendezvousServerOptions options;
  options.max_body_bytes = 1024;
  options.store.max_keys = 2;
  std::unique_ptr<RendezvousServer> small = StartServer(options);
  HttpStore store(StoreAt(small->port()));
  absl::Status too_big = store.Set("big", std::vector<char>(4096, 'x'), Within(kPatience));
  EXPECT_TRUE(absl::IsResourceExhausted(too_big)) << too_big;
  EXPECT_THAT(too_big.message(), HasSubstr("413"));
  ASSERT_TRUE(store.Set("a", Bytes("1"), Within(kPatience)).ok());
  ASSERT_TRUE(store.Set("b", Bytes("2"), Within(kPatience)).ok());
  ASSERT_TRUE(store.Set("a", Bytes("replaced"), Within(kPatience)).ok());
  absl::Status full = store.Set("c", Bytes("3"), Within(kPatience));
  EXPECT_TRUE(absl::IsResourceExhausted(full)) << full;
  EXPECT_THAT(full.message(), HasSubstr("limit of 2 keys"));
}

TEST(RendezvousSecretTest, RequestsWithoutTheSecretAreForbidden) {
  RendezvousServerOptions options;
  options.secret = "job-secret";
  std::unique_ptr<RendezvousServer> server = StartServer(options);

  HttpStore without(StoreAt(server->port()));
  absl::Status refused = without.Set("k", Bytes("v"), Within(kPatience));
  EXPECT_TRUE(absl::IsPermissionDenied(refused)) << refused;
  EXPECT_THAT(refused.message(), HasSubstr(absl::StrCat("127.0.0.1:", server->port())));

  HttpStoreOptions wrong_options = StoreAt(server->port());
  wrong_options.secret = "job-secreT";
  HttpStore wrong(wrong_options);
  EXPECT_TRUE(absl::IsPermissionDenied(wrong.TryGet("k", Within(kPatience)).status()));

  EXPECT_THAT(AnswerTo(server->port(), "GET /global/k HTTP/1.1\r\nHost: x\r\n\r\n"),
              StartsWith("HTTP/1.1 403"));

  HttpStoreOptions right_options = StoreAt(server->port());
  right_options.secret = "job-secret";
  HttpStore right(right_options);
  ASSERT_TRUE(right.Set("k", Bytes("v"), Within(kPatience)).ok());
  EXPECT_EQ(*right.Get("k", Within(kPatience)), Bytes("v"));
}

TEST_F(HttpStoreTest, GarbageIsAnswered400AndClosed) {
  EXPECT_THAT(AnswerTo(server_->port(), "hello there\r\n\r\n"), StartsWith("HTTP/1.1 400"));
  EXPECT_THAT(AnswerTo(server_->port(), std::string("\x16\x03\x01\x02\x00\x01\x00", 7), true),
              Not(StartsWith("HTTP/1.1 200")));
  EXPECT_THAT(AnswerTo(server_->port(), "GET /no-key HTTP/1.1\r\nHost: x\r\n\r\n"),
              StartsWith("HTTP/1.1 400"));
  EXPECT_THAT(AnswerTo(server_->port(), "GET /a/b/c HTTP/1.1\r\nHost: x\r\n\r\n"),
              StartsWith("HTTP/1.1 400"));
  ExpectServing();
}

TEST_F(HttpStoreTest, UnknownMethodsAreAnswered405AndClosed) {
  EXPECT_THAT(AnswerTo(server_->port(), "BREW /global/k HTTP/1.1\r\nHost: x\r\n\r\n"),
              AllOf(StartsWith("HTTP/1.1 405"), HasSubstr("Allow: GET, PUT, DELETE")));
  EXPECT_THAT(AnswerTo(server_->port(), "POST /global/k HTTP/1.1\r\nContent-Length: 1\r\n\r\nx"),
              StartsWith("HTTP/1.1 405"));
  ExpectServing();
}

TEST_F(HttpStoreTest, ATruncatedRequestIsRefused) {
  EXPECT_THAT(AnswerTo(server_->port(),
                       "PUT /global/k HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc",
                       /*stop_sending=*/true),
              StartsWith("HTTP/1.1 400"));
  EXPECT_THAT(AnswerTo(server_->port(), "GET /global/k HT", /*stop_sending=*/true),
              Not(StartsWith("HTTP/1.1 200")));
  EXPECT_FALSE(store_->TryGet("k", Within(kPatience))->has_value());
  ExpectServing();
}

TEST_F(HttpStoreTest, AHugeRequestIsAnswered413Or431) {
  EXPECT_THAT(
      AnswerTo(server_->port(),
               "PUT /global/k HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999\r\n\r\n"),
      StartsWith("HTTP/1.1 413"));
  EXPECT_THAT(AnswerTo(server_->port(), absl::StrCat("GET /global/k HTTP/1.1\r\nX-Big: ",
                                                     std::string(8192, 'b'), "\r\n\r\n")),
              StartsWith("HTTP/1.1 431"));
  ExpectServing();
}

TEST_F(HttpStoreTest, AConnectionThatNeverSendsIsClosed) {
  RawClient silent(server_->port());
  ASSERT_TRUE(silent.connected());
  const Clock::time_point start = Clock::now();
  bool closed = false;
  EXPECT_EQ(silent.ReadToClose(&closed), "");
  EXPECT_TRUE(closed);
  EXPECT_LT(Clock::now() - start, kPatience);
  ExpectServing();
}

TEST_F(HttpStoreTest, AKeepAliveConnectionServesSeveralRequests) {
  RawClient client(server_->port());
  client.Send(
      "PUT /global/k HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi"
      "GET /global/k HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  bool closed = false;
  const std::string answers = client.ReadToClose(&closed);
  EXPECT_TRUE(closed);
  EXPECT_THAT(answers, AllOf(StartsWith("HTTP/1.1 200"), HasSubstr("\r\n\r\nhi")));
}

TEST_F(HttpStoreTest, AClientThatExpects100ContinueGetsIt) {
  EXPECT_THAT(AnswerTo(server_->port(),
                       "PUT /global/k HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                       "Content-Length: 2\r\nConnection: close\r\n\r\nhi"),
              StartsWith("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200"));
  EXPECT_EQ(*store_->Get("k", Within(kPatience)), Bytes("hi"));
}

TEST(RendezvousServerTest, ConnectionsOverTheBoundAreClosed) {
  RendezvousServerOptions options;
  options.max_connections = 2;
  std::unique_ptr<RendezvousServer> server = StartServer(options);
  auto first = std::make_unique<RawClient>(server->port());
  auto second = std::make_unique<RawClient>(server->port());
  // The server accepts in the order of connecting: these two first.
  {
    RawClient third(server->port());
    bool closed = false;
    third.ReadToClose(&closed);
    EXPECT_TRUE(closed);
  }
  first.reset();
  second.reset();
  HttpStore store(StoreAt(server->port()));
  EXPECT_TRUE(store.Set("k", Bytes("v"), Within(kPatience)).ok());
}

TEST(RendezvousServerTest, RefusesAnAddressThatIsNotAnIp) {
  RendezvousServerOptions options;
  options.address = "not an address";
  EXPECT_TRUE(absl::IsInvalidArgument(RendezvousServer::Start(options).status()));
}

}  // namespace
}  // namespace collective::daemon::gloo
