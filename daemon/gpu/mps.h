// Whether NVIDIA's Multi-Process Service is running for this daemon's
// processes. Without it, the daemon and every client hold separate CUDA
// contexts, and the GPU time-slices between them: each collective then waits
// for context switches (measured on an H200: a 4-byte allreduce takes about
// 0.3 ms with one client and 1.3 ms with four, against 0.03 and 0.06-0.1 ms
// under MPS). Read once, at CUDA initialisation, by the engine thread.
#pragma once

#include <string>

namespace collective::daemon::gpu {

// The MPS control pipe this process would talk to: the directory
// CUDA_MPS_PIPE_DIRECTORY names (MPS's own default, /tmp/nvidia-mps, where
// it is unset or empty), followed by "/control".
std::string MpsControlPipe();

// True if that control pipe exists, i.e. an MPS control daemon serves this
// machine (or the container shares its pipe directory).
bool MpsRunning();

}  // namespace collective::daemon::gpu
