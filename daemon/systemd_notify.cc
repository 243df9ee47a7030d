#include "daemon/systemd_notify.h"

#include <string>

#include <systemd/sd-daemon.h>

#include "absl/strings/str_cat.h"

namespace collective::daemon {

void NotifyReady(absl::string_view status) {
  const std::string message = absl::StrCat("READY=1\nSTATUS=", status);
  ::sd_notify(0, message.c_str());
}

void NotifyStopping(absl::string_view status) {
  const std::string message = absl::StrCat("STOPPING=1\nSTATUS=", status);
  ::sd_notify(0, message.c_str());
}

}  // namespace collective::daemon
