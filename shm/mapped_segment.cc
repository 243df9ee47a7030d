#include "shm/mapped_segment.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/interprocess/exceptions.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace collective::shm {
namespace bip = boost::interprocess;

namespace {

absl::Status ErrnoError(absl::string_view what, const std::string& name, int error) {
  const absl::StatusCode code = error == ENOSPC || error == ENOMEM
                                    ? absl::StatusCode::kResourceExhausted
                                    : absl::StatusCode::kInternal;
  return absl::Status(
      code, absl::StrCat(what, " shared-memory segment '/", name, "': ", std::strerror(error)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<MappedSegment>> MappedSegment::Create(const CreateOptions& options) {
  try {
    bip::permissions permissions(options.mode);
    bip::shared_memory_object object(bip::create_only, options.name.c_str(), bip::read_write,
                                     permissions);
    const int fd = object.get_mapping_handle().handle;
    // Everything after creation must remove the name again on failure.
    auto remove = [&](absl::Status status) {
      bip::shared_memory_object::remove(options.name.c_str());
      return status;
    };
    // shm_open applies the umask; set the mode we asked for exactly.
    if (::fchmod(fd, options.mode) != 0) return remove(ErrnoError("chmod", options.name, errno));
    if ((options.owner_uid != ::geteuid() || options.owner_gid != ::getegid()) &&
        ::fchown(fd, options.owner_uid, options.owner_gid) != 0) {
      return remove(ErrnoError(
          absl::StrCat("give uid ", options.owner_uid, " gid ", options.owner_gid, " ownership of"),
          options.name, errno));
    }
    if (const int error = ::posix_fallocate(fd, 0, static_cast<off_t>(options.bytes)); error != 0) {
      return remove(
          ErrnoError(absl::StrCat("reserve ", options.bytes, " bytes for"), options.name, error));
    }
    bip::mapped_region region(object, bip::read_write);
    return std::unique_ptr<MappedSegment>(
        new MappedSegment(options.name, std::move(region), /*owner=*/true));
  } catch (const bip::interprocess_exception& e) {
    const int error = e.get_native_error();
    if (error == EEXIST) {
      return absl::AlreadyExistsError(
          absl::StrCat("shared-memory segment '/", options.name, "' already exists"));
    }
    return ErrnoError("create", options.name, error != 0 ? error : EIO);
  }
}

absl::StatusOr<std::unique_ptr<MappedSegment>> MappedSegment::Open(const std::string& name,
                                                                   uint64_t expected_bytes,
                                                                   bool writable) {
  const bip::mode_t mode = writable ? bip::read_write : bip::read_only;
  try {
    bip::shared_memory_object object(bip::open_only, name.c_str(), mode);
    bip::offset_t size = 0;
    if (!object.get_size(size) || static_cast<uint64_t>(size) != expected_bytes) {
      return absl::FailedPreconditionError(absl::StrCat("shared-memory segment '/", name, "' has ",
                                                        size, " bytes, expected ", expected_bytes));
    }
    bip::mapped_region region(object, mode);
    return std::unique_ptr<MappedSegment>(new MappedSegment(name, std::move(region), false));
  } catch (const bip::interprocess_exception& e) {
    const int error = e.get_native_error();
    if (error == ENOENT) {
      return absl::NotFoundError(absl::StrCat("shared-memory segment '/", name,
                                              "' does not exist (did the daemon restart?)"));
    }
    if (error == EACCES) {
      return absl::PermissionDeniedError(absl::StrCat(
          "no permission to map shared-memory segment '/", name, "' (it belongs to another uid)"));
    }
    return ErrnoError("open", name, error != 0 ? error : EIO);
  }
}

MappedSegment::~MappedSegment() { Unlink(); }

void MappedSegment::Unlink() {
  if (!owner_) return;
  owner_ = false;
  if (!bip::shared_memory_object::remove(name_.c_str())) {
    log::Shm().warn("could not remove shared-memory segment '/{}'", name_);
  }
}

}  // namespace collective::shm
