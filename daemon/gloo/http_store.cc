#include "daemon/gloo/http_store.h"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <string>
#include <thread>
#include <utility>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/rendezvous_protocol.h"
#include "common/status_macros.h"

namespace collective::daemon::gloo {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using std::chrono::milliseconds;

// Retrying an unreachable server, and asking again for a key not yet there:
// from a few milliseconds up to a ceiling that keeps a world of many
// daemons from flooding the server (horovod's workers ask every 10 ms).
constexpr milliseconds kFirstPause{2};
constexpr milliseconds kLastPause{100};
// A request made once its deadline has passed still gets this long.
constexpr milliseconds kLastChance{100};
// How much of an error response's text an error quotes.
constexpr size_t kQuotedBody = 200;

class Backoff {
 public:
  // Sleeps for the next pause, never past `deadline`.
  void Pause(Clock::time_point deadline) {
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return;
    std::this_thread::sleep_for(std::min<Clock::duration>(pause_, deadline - now));
    pause_ = std::min(pause_ * 2, kLastPause);
  }

 private:
  milliseconds pause_ = kFirstPause;
};

// RFC 3986's pchar, less nothing: what a path segment carries as it is.
bool IsPathChar(unsigned char c) {
  return std::isalnum(c) != 0 ||
         std::string_view("-._~!$&'()*+,;=:@").find(static_cast<char>(c)) != std::string_view::npos;
}

std::string EncodeSegment(absl::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (IsPathChar(c)) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xF]);
    }
  }
  return out;
}

// The start of an error response's body, printable, for an error message.
std::string Quote(const std::vector<char>& body) {
  std::string text;
  for (const char ch : body) {
    if (text.size() == kQuotedBody) {
      text += "...";
      break;
    }
    text.push_back(std::isprint(static_cast<unsigned char>(ch)) != 0 ? ch : '?');
  }
  return text.empty() ? std::string() : absl::StrCat(": ", text);
}

// Statuses a server may answer while it is starting, overloaded or timing a
// slow request out (horovod's answers 408): asked again.
bool IsTransient(unsigned status) {
  return status == 408 || status == 429 || status == 500 || status == 502 || status == 503 ||
         status == 504;
}

std::string MillisText(Clock::duration duration) {
  return absl::StrCat(std::chrono::duration_cast<milliseconds>(duration).count(), " ms");
}

}  // namespace

HttpStore::HttpStore(HttpStoreOptions options)
    : options_(std::move(options)),
      address_(options_.host.find(':') != std::string::npos
                   ? absl::StrCat("[", options_.host, "]:", options_.port)
                   : absl::StrCat(options_.host, ":", options_.port)) {}

std::string HttpStore::Target(absl::string_view key) const {
  return absl::StrCat("/", EncodeSegment(options_.scope), "/", EncodeSegment(key));
}

Clock::time_point HttpStore::DeadlineAfter(milliseconds timeout) const {
  const Clock::time_point now = Clock::now();
  if (timeout == ::gloo::kNoTimeout || timeout >= Clock::time_point::max() - now) {
    return Clock::time_point::max();
  }
  return now + timeout;
}

absl::StatusOr<HttpStore::Response> HttpStore::Exchange(absl::string_view method,
                                                        const std::string& target,
                                                        absl::Span<const char> body,
                                                        Clock::time_point expiry) {
  asio::io_context io;
  beast::error_code ec;
  tcp::resolver resolver(io);
  const auto endpoints = resolver.resolve(options_.host, std::to_string(options_.port), ec);
  if (ec)
    return absl::UnavailableError(absl::StrCat("cannot resolve ", address_, ": ", ec.message()));

  http::request<http::string_body> request(
      http::string_to_verb(beast::string_view(method.data(), method.size())), target, 11);
  request.set(http::field::host, address_);
  request.keep_alive(false);
  if (!options_.secret.empty()) request.set(rendezvous::kSecretHeader, options_.secret);
  if (method == "PUT") {
    request.body().assign(body.data(), body.size());
    request.prepare_payload();
  }
  http::response_parser<http::vector_body<char>> parser;
  parser.body_limit(options_.max_value_bytes);
  beast::flat_buffer buffer;

  // One chain of operations on this call's own io_context: the stream's
  // expiry bounds all of them. A server that answers before it has read our
  // whole body (a refusal) may reset the connection under the write, so the
  // answer is read even when the write failed.
  beast::tcp_stream stream(io);
  stream.expires_at(expiry);
  beast::error_code connect_ec;
  beast::error_code write_ec;
  beast::error_code read_ec;
  stream.async_connect(endpoints, [&](beast::error_code e, const tcp::endpoint&) {
    connect_ec = e;
    if (e) return;
    http::async_write(stream, request, [&](beast::error_code we, size_t) {
      write_ec = we;
      http::async_read(stream, buffer, parser, [&](beast::error_code re, size_t) { read_ec = re; });
    });
  });
  io.run();

  if (connect_ec) {
    return absl::UnavailableError(absl::StrCat(
        "cannot connect to ", address_, ": ",
        connect_ec == beast::error::timeout ? std::string("timed out") : connect_ec.message()));
  }
  if (read_ec) {
    if (read_ec == http::error::body_limit) {
      return absl::ResourceExhaustedError(absl::StrCat(method, " ", target, " at ", address_,
                                                       ": the value is over ",
                                                       options_.max_value_bytes, " bytes"));
    }
    const beast::error_code& first = write_ec ? write_ec : read_ec;
    return absl::UnavailableError(absl::StrCat(
        method, " ", target, " at ", address_, ": ",
        first == beast::error::timeout ? std::string("no answer in time") : first.message()));
  }
  Response response;
  response.status = parser.get().result_int();
  response.body = std::move(parser.get().body());
  return response;
}

absl::Status HttpStore::CheckCancelled() const {
  if (options_.cancelled == nullptr || !options_.cancelled->load()) return absl::OkStatus();
  return absl::CancelledError(
      absl::StrCat("the wait at the rendezvous server ", address_, " was cancelled"));
}

absl::StatusOr<HttpStore::Response> HttpStore::Request(absl::string_view method,
                                                       absl::string_view key,
                                                       absl::Span<const char> body,
                                                       Clock::time_point deadline) {
  const std::string target = Target(key);
  const Clock::time_point start = Clock::now();
  Backoff backoff;
  for (;;) {
    const Clock::time_point now = Clock::now();
    const Clock::time_point expiry =
        deadline > now ? std::min(deadline, now + Clock::duration(options_.request_timeout))
                       : now + Clock::duration(kLastChance);
    absl::StatusOr<Response> response = Exchange(method, target, body, expiry);
    std::string failure;
    if (response.ok()) {
      const unsigned status = response->status;
      if (status == 403) {
        return absl::PermissionDeniedError(
            absl::StrCat("the rendezvous server at ", address_, " refused ", method, " ", target,
                         " (403): the secret is missing or wrong", Quote(response->body)));
      }
      if (!IsTransient(status)) return response;
      failure = absl::StrCat("it answered ", status, Quote(response->body));
    } else if (absl::IsUnavailable(response.status())) {
      failure = std::string(response.status().message());
    } else {
      return response.status();
    }
    if (Clock::now() >= deadline) {
      return absl::UnavailableError(
          absl::StrCat("the rendezvous server at ", address_, " did not serve ", method, " ",
                       target, " within ", MillisText(Clock::now() - start), "; last: ", failure));
    }
    RETURN_IF_ERROR(CheckCancelled());
    backoff.Pause(deadline);
  }
}

absl::Status HttpStore::Set(absl::string_view key, absl::Span<const char> value,
                            Clock::time_point deadline) {
  absl::StatusOr<Response> response = Request("PUT", key, value, deadline);
  if (!response.ok()) return response.status();
  if (response->status == 200) return absl::OkStatus();
  const std::string text =
      absl::StrCat("the rendezvous server at ", address_, " refused to store key '", key,
                   "' of scope '", options_.scope, "' (", value.size(), " bytes) with ",
                   response->status, Quote(response->body));
  if (response->status == 413 || response->status == 431 || response->status == 507) {
    return absl::ResourceExhaustedError(text);
  }
  return absl::InternalError(text);
}

absl::StatusOr<std::optional<std::vector<char>>> HttpStore::TryGet(absl::string_view key,
                                                                   Clock::time_point deadline) {
  absl::StatusOr<Response> response = Request("GET", key, {}, deadline);
  if (!response.ok()) return response.status();
  if (response->status == 404) return std::nullopt;
  if (response->status == 200) return std::move(response->body);
  return absl::InternalError(absl::StrCat(
      "the rendezvous server at ", address_, " answered GET of key '", key, "' of scope '",
      options_.scope, "' with ", response->status, Quote(response->body)));
}

absl::StatusOr<std::vector<char>> HttpStore::Get(absl::string_view key,
                                                 Clock::time_point deadline) {
  std::vector<char> value;
  const std::vector<std::string> keys = {std::string(key)};
  absl::Status status = Wait(keys, deadline, &value);
  if (!status.ok()) return status;
  return value;
}

absl::Status HttpStore::Wait(const std::vector<std::string>& keys, Clock::time_point deadline) {
  return Wait(keys, deadline, nullptr);
}

absl::Status HttpStore::Wait(const std::vector<std::string>& keys, Clock::time_point deadline,
                             std::vector<char>* last_value) {
  const Clock::time_point start = Clock::now();
  std::vector<std::string> missing = keys;
  bool answered = false;  // by the server, during this wait
  Backoff backoff;
  const auto timed_out = [&](absl::string_view last_failure) {
    std::string text =
        absl::StrCat("timed out after ", MillisText(Clock::now() - start),
                     " waiting at the rendezvous server ", address_, " for keys of scope '",
                     options_.scope, "': ", absl::StrJoin(missing, ", "), " not seen");
    if (last_failure.empty()) return absl::DeadlineExceededError(text);
    // Never answered: say so, as a server out of reach.
    if (!answered) return absl::UnavailableError(absl::StrCat(text, "; ", last_failure));
    return absl::DeadlineExceededError(absl::StrCat(text, " (last request: ", last_failure, ")"));
  };
  for (;;) {
    std::vector<std::string> still_missing;
    for (size_t i = 0; i < missing.size(); ++i) {
      absl::StatusOr<std::optional<std::vector<char>>> value = TryGet(missing[i], deadline);
      if (!value.ok()) {
        if (!absl::IsUnavailable(value.status())) return value.status();
        // The deadline passed during this request.
        still_missing.insert(still_missing.end(), std::make_move_iterator(missing.begin() + i),
                             std::make_move_iterator(missing.end()));
        missing = std::move(still_missing);
        return timed_out(value.status().message());
      }
      answered = true;
      if (!value->has_value()) {
        still_missing.push_back(std::move(missing[i]));
      } else if (last_value != nullptr) {
        *last_value = std::move(**value);
      }
    }
    missing = std::move(still_missing);
    if (missing.empty()) return absl::OkStatus();
    if (Clock::now() >= deadline) return timed_out("");
    RETURN_IF_ERROR(CheckCancelled());
    backoff.Pause(deadline);
  }
}

absl::Status HttpStore::Delete(absl::string_view key, Clock::time_point deadline) {
  absl::StatusOr<Response> response = Request("DELETE", key, {}, deadline);
  if (!response.ok()) return response.status();
  if (response->status == 200) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(
      "the rendezvous server at ", address_, " answered DELETE of key '", key, "' of scope '",
      options_.scope, "' with ", response->status, Quote(response->body)));
}

void HttpStore::set(const std::string& key, const std::vector<char>& data) {
  absl::Status status = Set(key, data, DeadlineAfter(options_.timeout));
  if (!status.ok()) throw HttpStoreError(std::move(status));
}

std::vector<char> HttpStore::get(const std::string& key) {
  absl::StatusOr<std::vector<char>> value = Get(key, DeadlineAfter(options_.timeout));
  if (!value.ok()) throw HttpStoreError(value.status());
  return *std::move(value);
}

void HttpStore::wait(const std::vector<std::string>& keys) { wait(keys, options_.timeout); }

void HttpStore::wait(const std::vector<std::string>& keys, const milliseconds& timeout) {
  absl::Status status = Wait(keys, DeadlineAfter(timeout));
  if (!status.ok()) throw HttpStoreError(std::move(status));
}

HttpStoreError::HttpStoreError(absl::Status status)
    : ::gloo::IoException(std::string(status.message())), status_(std::move(status)) {}

absl::Status StoreErrorStatus(const std::exception& error) {
  if (const auto* store_error = dynamic_cast<const HttpStoreError*>(&error)) {
    return store_error->status();
  }
  return absl::UnknownError(error.what());
}

}  // namespace collective::daemon::gloo
