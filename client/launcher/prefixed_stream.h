// PrefixedStream: the read end of one child's output pipe, copied line by
// line, each line prefixed, to one of the launcher's own outputs, and, with
// a `copy`, as read to that file too (--output-filename).
#pragma once

#include <string>

#include "client/launcher/output_prefixer.h"
#include "client/launcher/unique_fd.h"

namespace collective::launcher {

class PrefixedStream {
 public:
  // `pipe` is made non-blocking: the launcher reads it only when poll says
  // so, and at the end drains it without waiting for a writer that may
  // never close it (a rank's background grandchild).
  PrefixedStream(UniqueFd pipe, std::string prefix, int destination, UniqueFd copy = {},
                 bool timestamp = false);

  bool open() const { return pipe_.valid(); }
  int fd() const { return pipe_.get(); }

  // Reads what is there now (one read) and writes the lines it completes.
  // At end of file, writes the unfinished last line and closes the pipe.
  void Pump();
  // Reads until nothing is left now, writes everything including an
  // unfinished last line, and closes the pipe.
  void Drain();

 private:
  // Returns false when nothing more can be read now (or ever).
  bool ReadOnce();
  void Close();

  UniqueFd pipe_;
  LinePrefixer prefixer_;
  int destination_;
  UniqueFd copy_;
};

}  // namespace collective::launcher
