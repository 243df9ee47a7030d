#include "client/launcher/output_prefixer.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace collective::launcher {

LinePrefixer::LinePrefixer(std::string prefix, size_t max_line_bytes)
    : prefix_(std::move(prefix)), max_line_bytes_(std::max<size_t>(max_line_bytes, 1)) {}

void LinePrefixer::Feed(absl::string_view data, std::string& out) {
  while (!data.empty()) {
    // A line may hold max_line_bytes_ bytes before its newline.
    const size_t room = max_line_bytes_ - partial_.size();
    const size_t newline = data.substr(0, room + 1).find('\n');
    if (newline != absl::string_view::npos) {
      EmitLine(data.substr(0, newline + 1), out);
      data.remove_prefix(newline + 1);
    } else if (data.size() > room) {
      // No newline within the limit: the limit ends the line.
      EmitLine(data.substr(0, room), out);
      out.push_back('\n');
      data.remove_prefix(room);
    } else {
      partial_.append(data.data(), data.size());
      return;
    }
  }
}

void LinePrefixer::Finish(std::string& out) {
  if (partial_.empty()) return;
  EmitLine("", out);
  out.push_back('\n');
}

void LinePrefixer::EmitLine(absl::string_view rest_of_line, std::string& out) {
  if (timestamp_) {
    out.append(absl::FormatTime("%a %b %e %H:%M:%S %Y", absl::Now(), absl::LocalTimeZone()));
  }
  out.append(prefix_);
  out.append(partial_);
  out.append(rest_of_line.data(), rest_of_line.size());
  partial_.clear();
}

}  // namespace collective::launcher
