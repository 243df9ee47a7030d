// Unpredictable values: session tokens and daemon epochs.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace collective::daemon::job {

// 16 random bytes from the kernel (getrandom).
std::string NewSessionToken();
uint64_t NewEpoch();

// Compares in time independent of where the inputs differ.
bool TokensEqual(absl::string_view a, absl::string_view b);

}  // namespace collective::daemon::job
