// Where the daemon looks for NVIDIA MPS's control pipe, and whether it finds it.
#include "daemon/gpu/mps.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>

namespace collective::daemon::gpu {
namespace {

class MpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* previous = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
    if (previous != nullptr) previous_ = previous;
    directory_ =
        std::filesystem::path(::testing::TempDir()) / ("mps-" + std::to_string(::getpid()));
    std::filesystem::create_directories(directory_);
  }
  void TearDown() override {
    if (previous_.has_value()) {
      setenv("CUDA_MPS_PIPE_DIRECTORY", previous_->c_str(), 1);
    } else {
      unsetenv("CUDA_MPS_PIPE_DIRECTORY");
    }
    std::filesystem::remove_all(directory_);
  }

  std::optional<std::string> previous_;
  std::filesystem::path directory_;
};

TEST_F(MpsTest, ThePipeDirectoryVariableNamesWhereTheControlPipeIs) {
  setenv("CUDA_MPS_PIPE_DIRECTORY", directory_.c_str(), 1);
  EXPECT_EQ(MpsControlPipe(), (directory_ / "control").string());
  EXPECT_FALSE(MpsRunning());
  std::ofstream(directory_ / "control").put('\n');  // stands in for the FIFO
  EXPECT_TRUE(MpsRunning());
}

TEST_F(MpsTest, WithoutTheVariableMpssOwnDefaultIsUsed) {
  unsetenv("CUDA_MPS_PIPE_DIRECTORY");
  EXPECT_EQ(MpsControlPipe(), "/tmp/nvidia-mps/control");
  setenv("CUDA_MPS_PIPE_DIRECTORY", "", 1);
  EXPECT_EQ(MpsControlPipe(), "/tmp/nvidia-mps/control");
}

}  // namespace
}  // namespace collective::daemon::gpu
