// The command line of a test worker: a scenario name, then "--name value"
// flags and bare "--switch"es, looked up by name.
#pragma once

#include <string>
#include <vector>

namespace collective::testing {

using Args = std::vector<std::string>;

// The value after `name`, or `fallback` when it is absent.
inline std::string Flag(const Args& args, const std::string& name,
                        const std::string& fallback = "") {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == name) return args[i + 1];
  }
  return fallback;
}

// Whether `name` is on the command line.
inline bool HasFlag(const Args& args, const std::string& name) {
  for (const auto& arg : args) {
    if (arg == name) return true;
  }
  return false;
}

}  // namespace collective::testing
