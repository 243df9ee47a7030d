#include "tests/common/trace_reader.h"

#include <fstream>
#include <sstream>

#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"

namespace collective::testing {

double TraceEvent::NumberArg(const std::string& key) const {
  const auto it = args.fields().find(key);
  return it == args.fields().end() ? -1 : it->second.number_value();
}

std::string TraceEvent::StringArg(const std::string& key) const {
  const auto it = args.fields().find(key);
  return it == args.fields().end() ? "" : it->second.string_value();
}

absl::StatusOr<std::vector<TraceEvent>> ReadTrace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream text;
  text << in.rdbuf();
  google::protobuf::ListValue list;
  const auto parsed = google::protobuf::util::JsonStringToMessage(text.str(), &list);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a JSON array: ", parsed.ToString(), "\n", text.str()));
  }
  std::vector<TraceEvent> events;
  for (const google::protobuf::Value& value : list.values()) {
    if (!value.has_struct_value()) {
      return absl::InvalidArgumentError(absl::StrCat(path, " holds a non-object event"));
    }
    const auto& fields = value.struct_value().fields();
    const auto text_field = [&](const char* key) {
      const auto it = fields.find(key);
      return it == fields.end() ? std::string() : it->second.string_value();
    };
    const auto number_field = [&](const char* key) {
      const auto it = fields.find(key);
      return it == fields.end() ? -1.0 : it->second.number_value();
    };
    TraceEvent event;
    event.name = text_field("name");
    event.ph = text_field("ph");
    event.scope = text_field("s");
    event.pid = static_cast<int64_t>(number_field("pid"));
    event.tid = static_cast<int64_t>(number_field("tid"));
    event.ts = number_field("ts");
    event.dur = number_field("dur");
    if (const auto it = fields.find("args"); it != fields.end()) {
      event.args = it->second.struct_value();
    }
    events.push_back(std::move(event));
  }
  return events;
}

std::vector<TraceEvent> SelectEvents(const std::vector<TraceEvent>& events, const std::string& name,
                                     const std::string& ph, int64_t pid) {
  std::vector<TraceEvent> selected;
  for (const TraceEvent& event : events) {
    if (event.name == name && event.ph == ph && (pid == -1 || event.pid == pid)) {
      selected.push_back(event);
    }
  }
  return selected;
}

std::vector<std::pair<std::string, int64_t>> TraceProcesses(const std::vector<TraceEvent>& events) {
  std::vector<std::pair<std::string, int64_t>> processes;
  for (const TraceEvent& event : SelectEvents(events, "process_name", "M")) {
    processes.emplace_back(event.StringArg("name"), event.pid);
  }
  return processes;
}

}  // namespace collective::testing
