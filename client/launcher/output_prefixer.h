// LinePrefixer: turns the bytes one rank writes to a pipe into whole lines
// that start with the rank's prefix ("[1] "). Pipes deliver whatever the
// writer's buffering and the kernel make of a line, so a line may arrive in
// pieces; it is held until its newline arrives, then written with a single
// write(2), which keeps the ranks' lines from cutting into each other.
#pragma once

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace collective::launcher {

class LinePrefixer {
 public:
  // A line that grows beyond this without a newline (a runaway progress bar,
  // a binary dump) is emitted as a line of its own at this length, so memory
  // stays bounded; the rest continues on a new prefixed line.
  static constexpr size_t kMaxLineBytes = size_t{1} << 20;

  explicit LinePrefixer(std::string prefix, size_t max_line_bytes = kMaxLineBytes);

  // Takes the next bytes of the stream and appends every line they complete,
  // prefixed and with its newline, to `out`.
  void Feed(absl::string_view data, std::string& out);
  // At the end of the stream: appends the unfinished last line, prefixed and
  // given a newline, to `out` (nothing if the stream ended with a newline).
  void Finish(std::string& out);

  const std::string& prefix() const { return prefix_; }
  // Each line then starts with the local time as Python's time.asctime()
  // writes it ("Fri Nov 27 13:40:00 2026"), before the prefix: horovodrun's
  // --prefix-output-with-timestamp.
  void set_timestamp(bool timestamp) { timestamp_ = timestamp; }

 private:
  void EmitLine(absl::string_view rest_of_line, std::string& out);

  std::string prefix_;
  size_t max_line_bytes_;
  bool timestamp_ = false;
  std::string partial_;  // the current line's bytes so far, without the prefix
};

}  // namespace collective::launcher
