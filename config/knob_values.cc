#include "config/knob_values.h"

#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace collective::config {
namespace {

// Largest first, so that FormatByteSize picks the largest exact unit.
constexpr std::array<std::pair<absl::string_view, uint64_t>, 4> kUnits = {{
    {"TiB", kTiB},
    {"GiB", kGiB},
    {"MiB", kMiB},
    {"KiB", kKiB},
}};

absl::StatusOr<uint64_t> SuffixMultiplier(absl::string_view suffix) {
  if (suffix.empty()) return 1;
  for (const auto& [unit, multiplier] : kUnits) {
    // "K" and "KiB" alike: both mean 1024, as in most daemons' configs.
    if (absl::EqualsIgnoreCase(suffix, unit) || absl::EqualsIgnoreCase(suffix, unit.substr(0, 1))) {
      return multiplier;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown size suffix '", suffix, "' (use K, KiB, M, MiB, G, GiB, T or TiB)"));
}

}  // namespace

absl::StatusOr<bool> ParseBool(absl::string_view text) {
  const absl::string_view word = absl::StripAsciiWhitespace(text);
  for (const absl::string_view yes : {"true", "yes", "on", "1"}) {
    if (absl::EqualsIgnoreCase(word, yes)) return true;
  }
  for (const absl::string_view no : {"false", "no", "off", "0"}) {
    if (absl::EqualsIgnoreCase(word, no)) return false;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", text, "' is not a boolean (true/false, yes/no, on/off or 1/0)"));
}

std::string FormatBool(bool value) { return value ? "true" : "false"; }

absl::StatusOr<uint64_t> ParseUnsigned(absl::string_view text, uint64_t max) {
  const absl::string_view digits = absl::StripAsciiWhitespace(text);
  if (digits.empty())
    return absl::InvalidArgumentError("empty value, expected an unsigned integer");
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error == std::errc::result_out_of_range) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is too large"));
  }
  // from_chars also accepts a leading '-'; only plain digits are unsigned.
  if (error != std::errc() || end != digits.data() + digits.size() || digits.front() == '-') {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not an unsigned integer"));
  }
  if (value > max) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is larger than ", max));
  }
  return value;
}

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text) {
  const absl::string_view stripped = absl::StripAsciiWhitespace(text);
  size_t digits = 0;
  while (digits < stripped.size() && absl::ascii_isdigit(stripped[digits])) ++digits;
  if (digits == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text,
        "' is not a byte size (an integer with an optional K/KiB, M/MiB, G/GiB or T/TiB suffix)"));
  }
  const auto count =
      ParseUnsigned(stripped.substr(0, digits), std::numeric_limits<uint64_t>::max());
  if (!count.ok()) return count.status();
  const auto multiplier =
      SuffixMultiplier(absl::StripLeadingAsciiWhitespace(stripped.substr(digits)));
  if (!multiplier.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a byte size: ", multiplier.status().message()));
  }
  if (*count > std::numeric_limits<uint64_t>::max() / *multiplier) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' does not fit in 64 bits"));
  }
  return *count * *multiplier;
}

std::string FormatByteSize(uint64_t bytes) {
  for (const auto& [unit, multiplier] : kUnits) {
    if (bytes != 0 && bytes % multiplier == 0) return absl::StrCat(bytes / multiplier, unit);
  }
  return absl::StrCat(bytes);
}

absl::StatusOr<double> ParseSeconds(absl::string_view text) {
  const absl::string_view number = absl::StripAsciiWhitespace(text);
  double value = 0;
  const auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), value,
                                            std::chars_format::general);
  // from_chars accepts "inf" and "nan": no use as a duration.
  if (number.empty() || error != std::errc() || end != number.data() + number.size() ||
      !std::isfinite(value)) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a number of seconds"));
  }
  return value;
}

std::string FormatSeconds(double seconds) {
  std::array<char, 32> buffer;
  const auto result = std::to_chars(buffer.data(), buffer.data() + buffer.size(), seconds);
  return std::string(buffer.data(), result.ptr);
}

absl::StatusOr<std::vector<uint32_t>> ParseUint32List(absl::string_view text) {
  std::vector<uint32_t> values;
  if (absl::StripAsciiWhitespace(text).empty()) return values;
  for (const absl::string_view item : absl::StrSplit(text, ',')) {
    const auto value = ParseUnsigned(item, std::numeric_limits<uint32_t>::max());
    if (!value.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("in the list '", text, "': ", value.status().message()));
    }
    values.push_back(static_cast<uint32_t>(*value));
  }
  return values;
}

std::string FormatUint32List(const std::vector<uint32_t>& values) {
  return absl::StrJoin(values, ",");
}

}  // namespace collective::config
