// A copy whose destination is written with non-temporal (streaming) stores:
// its lines are not read for ownership first and are not left in cache. For
// outputs that nothing reads soon and that are not in cache already (a
// result written into a client's arena output that is not one of the
// inputs); a destination in cache, or one read at once, wants memcpy.
#pragma once

#include <cstddef>

namespace collective::daemon::exec {

// Copies `bytes` from `source` to `destination` (no overlap; any alignment).
// The streamed stores are ordered before later stores only after
// StreamFence(), which whoever signals the copy done must call first.
void StreamCopy(void* destination, const void* source, size_t bytes);
void StreamFence();

}  // namespace collective::daemon::exec
