// How the launcher writes: whole buffers with write(2) (no stdio buffering,
// so its own messages and the ranks' prefixed lines reach the terminal in
// the order they were produced), and its own messages on stderr.
#pragma once

#include "absl/strings/string_view.h"

namespace collective::launcher {

// Writes all of `text` to `fd`. A reader that went away (EPIPE: the output
// was piped into `head`) or another error drops the text: the job goes on.
// Returns whether all of it was written.
bool WriteAll(int fd, absl::string_view text);

// "collectiverun: <message>\n" on stderr.
void Say(absl::string_view message);

}  // namespace collective::launcher
