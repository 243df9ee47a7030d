#include "daemon/observe/trace_event.h"

#include <cstddef>

namespace collective::daemon::observe {
namespace {

constexpr absl::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

// The length of the well-formed UTF-8 sequence at the start of `text`
// (Unicode table 3-7: no overlong forms, no surrogates, nothing above
// U+10FFFF), or 0 if there is none.
size_t Utf8SequenceLength(absl::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const auto continuation = [&](size_t i, unsigned char low = 0x80, unsigned char high = 0xBF) {
    return i < text.size() && byte(i) >= low && byte(i) <= high;
  };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return continuation(1) ? 2 : 0;
  if (lead >= 0xE0 && lead <= 0xEF) {
    const unsigned char low = lead == 0xE0 ? 0xA0 : 0x80;
    const unsigned char high = lead == 0xED ? 0x9F : 0xBF;
    return continuation(1, low, high) && continuation(2) ? 3 : 0;
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    const unsigned char low = lead == 0xF0 ? 0x90 : 0x80;
    const unsigned char high = lead == 0xF4 ? 0x8F : 0xBF;
    return continuation(1, low, high) && continuation(2) && continuation(3) ? 4 : 0;
  }
  return 0;
}

}  // namespace

void AppendJsonString(std::string& out, absl::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const size_t length = Utf8SequenceLength(text.substr(i));
      if (length == 0) {
        out.append(kReplacementCharacter.data(), kReplacementCharacter.size());
        ++i;
      } else {
        out.append(text.data() + i, length);
        i += length;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += "\\u00";
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 0xf]);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
  out.push_back('"');
}

void AppendMicros(std::string& out, uint64_t nanos) {
  const uint64_t fraction = nanos % 1000;
  absl::StrAppend(&out, nanos / 1000, ".", fraction < 100 ? "0" : "", fraction < 10 ? "0" : "",
                  fraction);
}

TraceEvent::TraceEvent(std::string& out, absl::string_view name, absl::string_view phase,
                       int64_t pid, int64_t tid)
    : out_(out) {
  out_ += "{\"name\":";
  AppendJsonString(out_, name);
  out_ += ",\"ph\":";
  AppendJsonString(out_, phase);
  absl::StrAppend(&out_, ",\"pid\":", pid, ",\"tid\":", tid);
}

TraceEvent& TraceEvent::Time(uint64_t nanos) {
  out_ += ",\"ts\":";
  AppendMicros(out_, nanos);
  return *this;
}

TraceEvent& TraceEvent::Duration(uint64_t nanos) {
  out_ += ",\"dur\":";
  AppendMicros(out_, nanos);
  return *this;
}

TraceEvent& TraceEvent::Scope(absl::string_view scope) {
  out_ += ",\"s\":";
  AppendJsonString(out_, scope);
  return *this;
}

TraceEvent& TraceEvent::Arg(absl::string_view key, absl::string_view value) {
  BeginArg(key);
  AppendJsonString(out_, value);
  return *this;
}

void TraceEvent::BeginArg(absl::string_view key) {
  out_ += has_args_ ? "," : ",\"args\":{";
  has_args_ = true;
  AppendJsonString(out_, key);
  out_.push_back(':');
}

void TraceEvent::Close() { out_ += has_args_ ? "}}" : "}"; }

}  // namespace collective::daemon::observe
