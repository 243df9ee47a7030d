// Reading back a small CSV file a test made the daemon write (the autotune
// log): its rows, each split at commas. No quoting: the files read so are
// numbers and words.
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"

namespace collective::testing {

inline std::vector<std::vector<std::string>> ReadCsvRows(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(in, line);) rows.push_back(absl::StrSplit(line, ','));
  return rows;
}

}  // namespace collective::testing
