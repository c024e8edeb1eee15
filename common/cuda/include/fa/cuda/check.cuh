// check.cuh — every CUDA call and every launch checked, with file, line and CUDA's own message.
//
//   FA_CUDA_CHECK(cudaMemcpy(...));        // throws fa::CudaError on failure
//   kernel<<<grid, block>>>(...);
//   FA_CUDA_CHECK_LAUNCH();                // launch errors now; execution errors at the next sync
//
// An out-of-memory cudaMalloc throws fa::OutOfMemory instead (see device_buffer.cuh), so that the
// harness reports an `oom` row and goes on.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace fa {

struct CudaError : std::runtime_error {
  CudaError(cudaError_t error, const char* what_call, const char* file, int line)
      : std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + what_call + " failed: " +
                           cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")"),
        code(error) {}
  cudaError_t code;
};

inline void cuda_check(cudaError_t code, const char* what_call, const char* file, int line) {
  if (code != cudaSuccess) throw CudaError(code, what_call, file, line);
}

}  // namespace fa

#define FA_CUDA_CHECK(call) ::fa::cuda_check((call), #call, __FILE__, __LINE__)
#define FA_CUDA_CHECK_LAUNCH() ::fa::cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
