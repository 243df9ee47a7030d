#include "daemon/node_monitor.h"

namespace collective::daemon {

NodeMonitor::NodeMonitor(const ControlChannel& channel, Clock::duration interval,
                         Clock::duration timeout)
    : channel_(channel), interval_(interval), timeout_(timeout), next_beat_(Clock::now()) {}

int NodeMonitor::Silent(Clock::time_point now) const {
  if (channel_.node() != 0) return now - channel_.last_heard(0) > timeout_ ? 0 : -1;
  for (int node = 1; node < channel_.nodes(); ++node) {
    if (now - channel_.last_heard(node) > timeout_) return node;
  }
  return -1;
}

}  // namespace collective::daemon
