// How libcollective's absl::Status errors reach Python. The binding throws
// StatusError; the translator registered here raises the Python exception
// that Horovod's users catch for the same failure.
#pragma once

#include <exception>
#include <string>
#include <utility>

#include <pybind11/pybind11.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace collective::python {

// Where an error surfaced. A call refuses its own arguments before anything
// runs (a ValueError, as Horovod raises); an error delivered while waiting
// means the collective itself failed on every rank (HorovodInternalError).
enum class ErrorPhase { kCall, kWait };

class StatusError : public std::exception {
 public:
  StatusError(absl::Status status, ErrorPhase phase)
      : status_(std::move(status)), phase_(phase), message_(status_.message()) {}

  const char* what() const noexcept override { return message_.c_str(); }
  const absl::Status& status() const { return status_; }
  ErrorPhase phase() const { return phase_; }

 private:
  absl::Status status_;
  ErrorPhase phase_;
  std::string message_;
};

inline void ThrowIfError(absl::Status status, ErrorPhase phase) {
  if (!status.ok()) throw StatusError(std::move(status), phase);
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value, ErrorPhase phase) {
  if (!value.ok()) throw StatusError(std::move(value).status(), phase);
  return *std::move(value);
}

// Registers the StatusError translator with the module.
void RegisterErrorTranslator();

}  // namespace collective::python
