// Reads a gradient workload file: one tensor per line, "name count AxBxC".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace collective::examples {

struct WorkloadTensor {
  std::string name;
  std::vector<int64_t> shape;
  int64_t elements = 0;
};

absl::StatusOr<std::vector<WorkloadTensor>> LoadWorkload(const std::string& path);

}  // namespace collective::examples
