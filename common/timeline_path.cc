#include "common/timeline_path.h"

#include <filesystem>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace collective {

absl::StatusOr<std::string> HorovodTimelinePath(absl::string_view value) {
  if (value.empty() || absl::EqualsIgnoreCase(value, "DYNAMIC")) return std::string();
  std::error_code error;
  const std::filesystem::path path = std::filesystem::absolute(std::string(value), error);
  if (error) return absl::InvalidArgumentError(absl::StrCat("'", value, "': ", error.message()));
  return path.lexically_normal().string();
}

}  // namespace collective
