#include "examples/workload.h"

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace collective::examples {

absl::StatusOr<std::vector<WorkloadTensor>> LoadWorkload(const std::string& path) {
  std::ifstream file(path);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot open workload file ", path));
  std::vector<WorkloadTensor> tensors;
  std::string line;
  for (int number = 1; std::getline(file, line); ++number) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    WorkloadTensor tensor;
    std::string shape;
    if (!(fields >> tensor.name >> tensor.elements >> shape)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", number, ": expected 'name count AxB'"));
    }
    int64_t product = 1;
    for (absl::string_view dim : absl::StrSplit(shape, 'x')) {
      int64_t value = 0;
      if (!absl::SimpleAtoi(dim, &value) || value < 0) {
        return absl::InvalidArgumentError(absl::StrCat(path, ":", number, ": bad shape ", shape));
      }
      tensor.shape.push_back(value);
      product *= value;
    }
    if (product != tensor.elements) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", number, ": shape ", shape, " does not have ", tensor.elements, " elements"));
    }
    tensors.push_back(std::move(tensor));
  }
  if (tensors.empty()) return absl::InvalidArgumentError(absl::StrCat(path, " lists no tensors"));
  return tensors;
}

}  // namespace collective::examples
