// A fresh directory under /tmp, removed with everything in it at the end of
// its scope. Under /tmp and with a short name, so that Unix socket paths in
// it stay within sun_path's 108 bytes.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>

#include <stdlib.h>

namespace collective::testing {

class TemporaryDirectory {
 public:
  // `tag` names the directory: /tmp/cld-TAG-XXXXXX.
  explicit TemporaryDirectory(const std::string& tag = "tmp") {
    std::string pattern = "/tmp/cld-" + tag + "-XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TemporaryDirectory() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;

  // Empty if the directory could not be made.
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace collective::testing
