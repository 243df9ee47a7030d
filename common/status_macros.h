// absl::Status plumbing: early returns that add context on the way out.
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace collective {

// Returns `status` with "context: " prepended to its message (same code).
inline absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok() || context.empty()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

}  // namespace collective

#define COLLECTIVE_STATUS_CONCAT_INNER(a, b) a##b
#define COLLECTIVE_STATUS_CONCAT(a, b) COLLECTIVE_STATUS_CONCAT_INNER(a, b)

// RETURN_IF_ERROR(expr): returns the absl::Status `expr` when it is not OK.
#define RETURN_IF_ERROR(expr)                                                 \
  do {                                                                        \
    if (::absl::Status _collective_status = (expr); !_collective_status.ok()) \
      return _collective_status;                                              \
  } while (false)

// RETURN_IF_ERROR_WITH(expr, context): as above, with `context` prepended.
#define RETURN_IF_ERROR_WITH(expr, context)                                   \
  do {                                                                        \
    if (::absl::Status _collective_status = (expr); !_collective_status.ok()) \
      return ::collective::Annotate(_collective_status, (context));           \
  } while (false)

#define COLLECTIVE_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr, context)           \
  auto statusor = (expr);                                                        \
  if (!statusor.ok()) return ::collective::Annotate(statusor.status(), context); \
  lhs = std::move(statusor).value()

// ASSIGN_OR_RETURN(lhs, expr): evaluates the absl::StatusOr `expr`; returns
// its status when not OK, else moves its value into `lhs` (which may be a
// declaration, e.g. `auto x`).
#define ASSIGN_OR_RETURN(lhs, expr)                                                                \
  COLLECTIVE_ASSIGN_OR_RETURN_IMPL(COLLECTIVE_STATUS_CONCAT(_collective_statusor_, __LINE__), lhs, \
                                   expr, "")

// ASSIGN_OR_RETURN_WITH(lhs, expr, context): as above, with context.
#define ASSIGN_OR_RETURN_WITH(lhs, expr, context)                                                  \
  COLLECTIVE_ASSIGN_OR_RETURN_IMPL(COLLECTIVE_STATUS_CONCAT(_collective_statusor_, __LINE__), lhs, \
                                   expr, context)
