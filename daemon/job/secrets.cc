#include "daemon/job/secrets.h"

#include <cerrno>
#include <cstring>

#include <sys/random.h>

namespace collective::daemon::job {
namespace {

void FillRandom(void* out, size_t bytes) {
  auto* cursor = static_cast<char*>(out);
  while (bytes > 0) {
    const ssize_t got = ::getrandom(cursor, bytes, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      // getrandom cannot fail for small requests once the pool is ready;
      // there is no safe value to fall back to.
      std::abort();
    }
    cursor += got;
    bytes -= static_cast<size_t>(got);
  }
}

}  // namespace

std::string NewSessionToken() {
  std::string token(16, '\0');
  FillRandom(token.data(), token.size());
  return token;
}

uint64_t NewEpoch() {
  uint64_t epoch = 0;
  while (epoch == 0) FillRandom(&epoch, sizeof(epoch));
  return epoch;
}

}  // namespace collective::daemon::job
