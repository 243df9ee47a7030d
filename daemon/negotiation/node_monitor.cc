#include "daemon/negotiation/node_monitor.h"

namespace collective::daemon::negotiation {

NodeMonitor::NodeMonitor(const ControlLink& link, Clock::duration interval, Clock::duration timeout)
    : link_(link), interval_(interval), timeout_(timeout), next_beat_(Clock::now()) {}

int NodeMonitor::Silent(Clock::time_point now) const {
  if (link_.node() != 0) return now - link_.last_heard(0) > timeout_ ? 0 : -1;
  for (int node = 1; node < link_.nodes(); ++node) {
    if (now - link_.last_heard(node) > timeout_) return node;
  }
  return -1;
}

}  // namespace collective::daemon::negotiation
