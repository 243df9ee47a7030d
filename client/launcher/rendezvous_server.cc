#include "client/launcher/rendezvous_server.h"

#include <array>
#include <chrono>
#include <exception>
#include <optional>
#include <thread>
#include <utility>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/rendezvous_protocol.h"
#include "common/secrets_equal.h"

namespace collective::launcher {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// After a refusal, the rest of the client's request is read and dropped for
// this long before the connection closes, so that the client reads our
// answer instead of a reset (the kernel resets a connection closed with
// unread bytes).
constexpr std::chrono::milliseconds kLinger{500};
// A failing accept (out of descriptors) is tried again after this pause.
constexpr std::chrono::milliseconds kAcceptPause{50};

absl::string_view View(beast::string_view text) { return {text.data(), text.size()}; }

// "/<scope>/<key>", both non-empty, neither with a '/': taken as they are,
// never decoded (common/rendezvous_protocol.h).
bool SplitTarget(absl::string_view target, absl::string_view* scope, absl::string_view* key) {
  if (target.size() < 4 || target[0] != '/') return false;
  const size_t slash = target.find('/', 1);
  if (slash == absl::string_view::npos || slash == 1 || slash + 1 == target.size()) return false;
  *scope = target.substr(1, slash - 1);
  *key = target.substr(slash + 1);
  return key->find('/') == absl::string_view::npos;
}

}  // namespace

class RendezvousServer::Impl {
 public:
  explicit Impl(RendezvousServerOptions options)
      : options_(std::move(options)),
        idle_timeout_(absl::ToChronoMilliseconds(options_.idle_timeout)),
        store_(options_.store),
        acceptor_(io_),
        accept_pause_(io_) {}

  ~Impl() {
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }

  absl::Status Listen();
  void Run();

  uint16_t port() const { return port_; }
  RendezvousStore& store() { return store_; }

 private:
  class Session;
  void Accept();

  const RendezvousServerOptions options_;
  const std::chrono::milliseconds idle_timeout_;
  RendezvousStore store_;
  uint16_t port_ = 0;
  // Sessions count themselves in and out; only the server's thread touches
  // the count, and it outlives io_, whose destruction ends the last sessions.
  size_t connections_ = 0;
  asio::io_context io_{1};
  tcp::acceptor acceptor_;
  asio::steady_timer accept_pause_;
  std::thread thread_;
};

// One accepted connection: reads a request's header, checks it, reads its
// body, answers, and reads the next (keep-alive) or closes. Owned by the
// handlers of its pending operation.
class RendezvousServer::Impl::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Impl& server, tcp::socket socket) : server_(server), stream_(std::move(socket)) {
    ++server_.connections_;
  }
  ~Session() { --server_.connections_; }

  void ReadHeader() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(server_.options_.max_header_bytes));
    parser_->body_limit(server_.options_.max_body_bytes);
    stream_.expires_after(server_.idle_timeout_);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

 private:
  using Response = http::response<http::string_body>;

  void OnHeader(beast::error_code ec) {
    if (ec) return OnReadError(ec);
    const auto& request = parser_->get();
    version_ = request.version();
    const http::verb method = request.method();
    if (method != http::verb::get && method != http::verb::put && method != http::verb::delete_) {
      return Refuse(http::status::method_not_allowed,
                    absl::StrCat("method ", View(request.method_string()),
                                 " is not served: GET, PUT or DELETE"));
    }
    const std::string& secret = server_.options_.secret;
    if (!secret.empty() && !SecretsEqual(View(request[rendezvous::kSecretHeader]), secret)) {
      return Refuse(http::status::forbidden,
                    absl::StrCat("missing or wrong ", rendezvous::kSecretHeader));
    }
    absl::string_view scope;
    absl::string_view key;
    if (!SplitTarget(View(request.target()), &scope, &key)) {
      return Refuse(http::status::bad_request,
                    absl::StrCat("the target is not /<scope>/<key>: ", View(request.target())));
    }
    if (parser_->is_done()) return Serve();
    if (beast::iequals(request[http::field::expect], "100-continue")) {
      // curl and other clients wait for this before sending a large body.
      auto interim =
          std::make_shared<http::response<http::empty_body>>(http::status::continue_, version_);
      http::async_write(stream_, *interim,
                        [self = shared_from_this(), interim](beast::error_code write_ec, size_t) {
                          if (write_ec) return self->Close();
                          self->ReadBody();
                        });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return self->OnReadError(ec);
                       self->Serve();
                     });
  }

  void OnReadError(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec.category() != http::make_error_code(http::error::end_of_stream).category()) {
      // Gone, idle too long, or broken underneath: nobody to answer.
      return Close();
    }
    if (ec == http::error::body_limit) {
      return Refuse(http::status::payload_too_large,
                    absl::StrCat("a value is at most ", server_.options_.max_body_bytes, " bytes"));
    }
    if (ec == http::error::header_limit) {
      return Refuse(http::status::request_header_fields_too_large,
                    absl::StrCat("a request header is at most ", server_.options_.max_header_bytes,
                                 " bytes"));
    }
    Refuse(http::status::bad_request, absl::StrCat("malformed request: ", ec.message()));
  }

  void Serve() {
    auto& request = parser_->get();
    absl::string_view scope;
    absl::string_view key;
    SplitTarget(View(request.target()), &scope, &key);
    RendezvousStore& store = server_.store_;
    switch (request.method()) {
      case http::verb::get: {
        std::optional<std::string> value = store.Get(scope, key);
        if (!value.has_value()) return Answer(http::status::not_found, "", !request.keep_alive());
        return Answer(http::status::ok, std::move(*value), !request.keep_alive());
      }
      case http::verb::put: {
        absl::Status stored = store.Put(scope, key, std::move(request.body()));
        if (!stored.ok()) {
          return Refuse(http::status::insufficient_storage, std::string(stored.message()));
        }
        return Answer(http::status::ok, "", !request.keep_alive());
      }
      default:
        store.Delete(scope, key);
        return Answer(http::status::ok, "", !request.keep_alive());
    }
  }

  // Answers and closes: the request is not one we serve.
  void Refuse(http::status status, std::string why) { Answer(status, std::move(why), true); }

  void Answer(http::status status, std::string body, bool close) {
    auto response = std::make_shared<Response>(status, version_ == 10 ? 10 : 11);
    if (status == http::status::method_not_allowed) {
      response->set(http::field::allow, "GET, PUT, DELETE");
    }
    response->body() = std::move(body);
    response->prepare_payload();
    response->keep_alive(!close);
    stream_.expires_after(server_.idle_timeout_);
    http::async_write(stream_, *response,
                      [self = shared_from_this(), response, close](beast::error_code ec, size_t) {
                        if (ec) return self->Close();
                        if (close) return self->Linger();
                        self->ReadHeader();
                      });
  }

  // Closes our side, then reads and drops until the client closes its side
  // or kLinger passes.
  void Linger() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(kLinger);
    Drain();
  }

  void Drain() {
    stream_.async_read_some(asio::buffer(drain_),
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (ec) return self->Close();
                              self->Drain();
                            });
  }

  void Close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  Impl& server_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  unsigned version_ = 11;
  std::array<char, 4096> drain_{};
};

absl::Status RendezvousServer::Impl::Listen() {
  beast::error_code ec;
  const asio::ip::address address = asio::ip::make_address(options_.address, ec);
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat("the rendezvous server's address '",
                                                   options_.address, "' is not an IP address"));
  }
  const tcp::endpoint endpoint(address, options_.port);
  const auto failed = [&](absl::string_view step) {
    return absl::UnavailableError(absl::StrCat("the rendezvous server cannot ", step, " ",
                                               endpoint.address().to_string(), " port ",
                                               options_.port, ": ", ec.message()));
  };
  if (acceptor_.open(endpoint.protocol(), ec)) return failed("open a socket for");
  if (acceptor_.set_option(asio::socket_base::reuse_address(true), ec)) {
    return failed("set SO_REUSEADDR for");
  }
  if (acceptor_.bind(endpoint, ec)) return failed("bind");
  if (acceptor_.listen(asio::socket_base::max_listen_connections, ec)) return failed("listen on");
  port_ = acceptor_.local_endpoint(ec).port();
  if (ec) return failed("read the port of");
  return absl::OkStatus();
}

void RendezvousServer::Impl::Accept() {
  acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (ec) {
      accept_pause_.expires_after(kAcceptPause);
      accept_pause_.async_wait([this](beast::error_code wait_ec) {
        if (!wait_ec) Accept();
      });
      return;
    }
    // Over the bound, the connection closes unanswered (socket's destructor).
    if (connections_ < options_.max_connections) {
      std::make_shared<Session>(*this, std::move(socket))->ReadHeader();
    }
    Accept();
  });
}

void RendezvousServer::Impl::Run() {
  Accept();
  thread_ = std::thread([this] {
    // A handler that throws (out of memory) loses its connection, not the
    // server: run again until stopped.
    for (;;) {
      try {
        io_.run();
        return;
      } catch (const std::exception&) {
        if (io_.stopped()) return;
      }
    }
  });
}

absl::StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::Start(
    RendezvousServerOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  if (absl::Status listening = impl->Listen(); !listening.ok()) return listening;
  impl->Run();
  return std::unique_ptr<RendezvousServer>(new RendezvousServer(std::move(impl)));
}

RendezvousServer::RendezvousServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RendezvousServer::~RendezvousServer() = default;

uint16_t RendezvousServer::port() const { return impl_->port(); }
RendezvousStore& RendezvousServer::store() { return impl_->store(); }

}  // namespace collective::launcher
