// How collectivectl shows a StatusResponse to people: a summary and tables.
#pragma once

#include <string>

#include "collective/v1/status.pb.h"

namespace collective::cli {

std::string FormatStatus(const v1::StatusResponse& status);

// "1.5 GiB", "512 B".
std::string HumanBytes(uint64_t bytes);
// "3h02m", "4m10s", "12.3s".
std::string HumanDuration(double seconds);

}  // namespace collective::cli
