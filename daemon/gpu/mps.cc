#include "daemon/gpu/mps.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace collective::daemon::gpu {

std::string MpsControlPipe() {
  const char* directory = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  const std::string base =
      directory != nullptr && *directory != '\0' ? directory : "/tmp/nvidia-mps";
  return base + "/control";
}

bool MpsRunning() {
  std::error_code ignored;
  return std::filesystem::exists(MpsControlPipe(), ignored);
}

}  // namespace collective::daemon::gpu
