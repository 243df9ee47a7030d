// Tells systemd (Type=notify) what the daemon is doing. A no-op when the
// daemon does not run under systemd.
#pragma once

#include "absl/strings/string_view.h"

namespace collective::daemon {

void NotifyReady(absl::string_view status);
void NotifyStopping(absl::string_view status);

}  // namespace collective::daemon
