#include "common/duplicate_name.h"

#include "absl/strings/str_cat.h"

namespace collective {

absl::Status DuplicateNameError(absl::string_view name, absl::string_view where) {
  return absl::AlreadyExistsError(
      absl::StrCat("tensor '", name, "' is already outstanding on ", where,
                   "; a name can be submitted again only after its collective has completed"));
}

}  // namespace collective
