#include "client/launcher/prefixed_stream.h"

#include <cerrno>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

#include "client/launcher/launcher_output.h"

namespace collective::launcher {
namespace {

constexpr size_t kReadBytes = 64 * 1024;

}  // namespace

PrefixedStream::PrefixedStream(UniqueFd pipe, std::string prefix, int destination, UniqueFd copy,
                               bool timestamp)
    : pipe_(std::move(pipe)),
      prefixer_(std::move(prefix)),
      destination_(destination),
      copy_(std::move(copy)) {
  prefixer_.set_timestamp(timestamp);
  if (pipe_.valid()) {
    ::fcntl(pipe_.get(), F_SETFL, ::fcntl(pipe_.get(), F_GETFL) | O_NONBLOCK);
  }
}

void PrefixedStream::Pump() {
  if (open()) ReadOnce();
}

void PrefixedStream::Drain() {
  while (open() && ReadOnce()) {
  }
  Close();
}

bool PrefixedStream::ReadOnce() {
  char buffer[kReadBytes];
  ssize_t got;
  do {
    got = ::read(pipe_.get(), buffer, sizeof(buffer));
  } while (got < 0 && errno == EINTR);
  if (got < 0 && errno == EAGAIN) return false;
  if (got <= 0) {
    Close();
    return false;
  }
  if (copy_.valid()) WriteAll(copy_.get(), {buffer, static_cast<size_t>(got)});
  std::string lines;
  prefixer_.Feed({buffer, static_cast<size_t>(got)}, lines);
  WriteAll(destination_, lines);
  return true;
}

void PrefixedStream::Close() {
  if (!open()) return;
  std::string last;
  prefixer_.Finish(last);
  WriteAll(destination_, last);
  pipe_.Reset();
}

}  // namespace collective::launcher
