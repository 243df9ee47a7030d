// The nodes of a set, as Gloo knows them: a Gloo context among the daemons
// of those nodes (context rank = the node's place in the set's span). The
// job's global set has the context the job's world formed through its
// rendezvous; a set with members on fewer nodes gets a context of its own.
// Shared by the spans and transfers that use it; the last one frees it.
#pragma once

#include <memory>
#include <utility>

#include <gloo/context.h>

#include "daemon/job/set_span.h"

namespace collective::daemon::gloo {

class GlooGroup : public job::NodeGroup {
 public:
  explicit GlooGroup(std::shared_ptr<::gloo::Context> context) : context_(std::move(context)) {}

  const std::shared_ptr<::gloo::Context>& context() const { return context_; }

 private:
  std::shared_ptr<::gloo::Context> context_;
};

// The context of a span whose group a Gloo job world made.
inline const std::shared_ptr<::gloo::Context>& ContextOf(const job::SetSpan& span) {
  return static_cast<const GlooGroup&>(*span.group).context();
}

}  // namespace collective::daemon::gloo
