// The refusal of a tensor name that is already outstanding on a rank, in
// one place: libcollective refuses it at the call, the daemon's coordinator
// again (it trusts no client to have checked), and the Horovod APIs of the
// Python package in Horovod's own words, which they take from
// collective._core. The binding sees only libcollective's API and this
// header's constant: it links nothing of collective_common.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace collective {

// ALREADY_EXISTS: "tensor 'NAME' is already outstanding on WHERE; a name can
// be submitted again only after its collective has completed". `where` is
// "this rank" (libcollective, before anything is sent) or "rank R (request
// N)" (the daemon, which knows the first request).
absl::Status DuplicateNameError(absl::string_view name, absl::string_view where);

// Horovod's text for the same refusal (horovod/common/common.h), raised as
// ValueError by collective.torch as by Horovod. Those names stay in use
// until synchronize(), past the completion libcollective goes by, so the
// Python layer refuses them itself; users' code may match this text.
inline constexpr absl::string_view kHorovodDuplicateNameText =
    "Requested to allreduce, allgather, or broadcast a tensor with the same name as another "
    "tensor that is currently being processed.  If you want to request another tensor, use a "
    "different tensor name.";

}  // namespace collective
