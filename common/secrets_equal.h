// Comparing secrets (session tokens, a rendezvous's job secret) in a time
// that depends only on their lengths, not on where they differ.
#pragma once

#include "absl/strings/string_view.h"

namespace collective {

bool SecretsEqual(absl::string_view a, absl::string_view b);

}  // namespace collective
