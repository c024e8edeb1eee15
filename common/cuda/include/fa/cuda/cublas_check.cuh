// cublas_check.cuh — every cuBLAS call checked, like FA_CUDA_CHECK for the runtime.
//
//   FA_CUBLAS_CHECK(cublasSgemmStridedBatched(...));   // throws fa::CudaError-like fa::CublasError
//
// CUBLAS_STATUS_ALLOC_FAILED (cuBLAS could not get device memory for itself) throws
// fa::OutOfMemory, so that the harness reports an `oom` row as it does for our own cudaMalloc.
// Header-only: a target that uses it links CUDA::cublas itself (stage 03 does).
#pragma once

#include <cublas_v2.h>

#include <stdexcept>
#include <string>

#include "fa/memory.hpp"

namespace fa {

struct CublasError : std::runtime_error {
  CublasError(cublasStatus_t status, const char* what_call, const char* file, int line)
      : std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + what_call + " failed: " +
                           cublasGetStatusName(status) + " (" + cublasGetStatusString(status) + ")"),
        code(status) {}
  cublasStatus_t code;
};

inline void cublas_check(cublasStatus_t code, const char* what_call, const char* file, int line) {
  if (code == CUBLAS_STATUS_SUCCESS) return;
  if (code == CUBLAS_STATUS_ALLOC_FAILED)
    throw OutOfMemory(std::string(what_call) + ": cuBLAS could not allocate device memory");
  throw CublasError(code, what_call, file, line);
}

}  // namespace fa

#define FA_CUBLAS_CHECK(call) ::fa::cublas_check((call), #call, __FILE__, __LINE__)
