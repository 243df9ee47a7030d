// A POSIX shared-memory object mapped into this process (Boost.Interprocess).
// The daemon creates segments; clients open them by name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <sys/types.h>

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>

#include "absl/status/statusor.h"

namespace collective::shm {

class MappedSegment {
 public:
  struct CreateOptions {
    std::string name;  // without the leading '/'
    uint64_t bytes = 0;
    uid_t owner_uid = 0;
    gid_t owner_gid = 0;
    mode_t mode = 0600;
  };

  // Creates the object (failing if the name exists), sets its owner and mode,
  // reserves its pages in the shared-memory filesystem, so that running out
  // of /dev/shm is an error here rather than a SIGBUS later, and maps it
  // read-write. The name is unlinked when the returned object is destroyed.
  static absl::StatusOr<std::unique_ptr<MappedSegment>> Create(const CreateOptions& options);

  // Maps an existing object. `expected_bytes` guards against a segment of the
  // wrong size (a stale or foreign object with the same name).
  static absl::StatusOr<std::unique_ptr<MappedSegment>> Open(const std::string& name,
                                                             uint64_t expected_bytes,
                                                             bool writable);

  ~MappedSegment();
  MappedSegment(const MappedSegment&) = delete;
  MappedSegment& operator=(const MappedSegment&) = delete;

  // Removes the name now; existing mappings (ours and others') stay valid.
  void Unlink();

  std::byte* data() const { return static_cast<std::byte*>(region_.get_address()); }
  uint64_t size() const { return region_.get_size(); }
  const std::string& name() const { return name_; }

 private:
  MappedSegment(std::string name, boost::interprocess::mapped_region region, bool owner)
      : name_(std::move(name)), region_(std::move(region)), owner_(owner) {}

  std::string name_;
  boost::interprocess::mapped_region region_;
  bool owner_;
};

}  // namespace collective::shm
