#include "daemon/job/set_span.h"

#include <algorithm>

namespace collective::daemon::job {

int32_t SetSpan::IndexOf(int32_t set_rank) const {
  const auto after = std::upper_bound(first.begin(), first.end(), set_rank);
  return static_cast<int32_t>(after - first.begin()) - 1;
}

std::unique_ptr<SetSpan> SpanOf(const ProcessSet& set, const NodeLayout& layout) {
  auto span = std::make_unique<SetSpan>();
  span->index = -1;
  for (int32_t set_rank = 0; set_rank < set.size(); ++set_rank) {
    const int32_t node = layout.NodeOf(set.ranks[set_rank]);
    if (span->nodes.empty() || span->nodes.back() != node) {
      if (node == layout.node) span->index = span->size();
      span->nodes.push_back(node);
      span->first.push_back(set_rank);
      span->count.push_back(0);
    }
    ++span->count.back();
  }
  return span;
}

}  // namespace collective::daemon::job
