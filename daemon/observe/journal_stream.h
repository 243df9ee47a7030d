// Whether the daemon's log lines carry syslog priorities for journald
// (log_priority_prefix): under systemd, stderr is a stream to the journal,
// which reads a leading "<3>" as the entry's priority, so that `journalctl
// -p err -u collectived` finds the daemon's errors.
#pragma once

#include <sys/types.h>

#include "config/daemon_config.h"

namespace collective::daemon::observe {

// Whether `journal_stream` (JOURNAL_STREAM's "DEVICE:INODE", which systemd
// sets for a service whose stderr it connects to the journal) names the
// stream `fd` is. A process that inherited the variable but writes its
// stderr elsewhere (a child redirected to a file) does not match.
bool StreamIsJournal(const char* journal_stream, int fd);

// auto: whether stderr is the journal (JOURNAL_STREAM, systemd's variable
// like NOTIFY_SOCKET, not a knob of ours); always; never.
bool UsePriorityPrefix(config::LogPriorityPrefix setting);

}  // namespace collective::daemon::observe
