// Text forms of knob values shared by the YAML file, the environment and the
// flags: booleans, unsigned integers, byte sizes, seconds and uid/gid lists.
// Messages say only why the text is wrong; the caller names the knob and the
// source.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace collective::config {

inline constexpr uint64_t kKiB = uint64_t{1} << 10;
inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline constexpr uint64_t kGiB = uint64_t{1} << 30;
inline constexpr uint64_t kTiB = uint64_t{1} << 40;

// true/false, yes/no, on/off or 1/0, case-insensitive (surrounding
// whitespace allowed): what YAML 1.1, shell scripts and systemd accept.
absl::StatusOr<bool> ParseBool(absl::string_view text);
// "true" or "false"; ParseBool reads it back.
std::string FormatBool(bool value);

// Decimal digits only (surrounding whitespace allowed), at most `max`.
absl::StatusOr<uint64_t> ParseUnsigned(absl::string_view text, uint64_t max);

// An integer with an optional suffix K, KiB, M, MiB, G, GiB, T or TiB, all
// powers of 1024, case-insensitive, optionally after a space: "64MiB",
// "64 MiB", "1g", "4096".
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text);
// The largest exact unit: "64MiB", "3KiB", "1536", "0". ParseByteSize reads it back.
std::string FormatByteSize(uint64_t bytes);

// A finite decimal number: "60", "0.5", "1e3".
absl::StatusOr<double> ParseSeconds(absl::string_view text);
// The shortest text that reads back to the same double.
std::string FormatSeconds(double seconds);

// Comma-separated, whitespace allowed around items: "1000, 1001"; "" is
// the empty list.
absl::StatusOr<std::vector<uint32_t>> ParseUint32List(absl::string_view text);
// "1000,1001"; ParseUint32List reads it back.
std::string FormatUint32List(const std::vector<uint32_t>& values);

}  // namespace collective::config
