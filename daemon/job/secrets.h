// Unpredictable values: session tokens and daemon epochs.
#pragma once

#include <cstdint>
#include <string>

namespace collective::daemon::job {

// 16 random bytes from the kernel (getrandom).
std::string NewSessionToken();
uint64_t NewEpoch();

}  // namespace collective::daemon::job
