// shared_memory.cuh — does a kernel's shared memory fit on this GPU? Asked at launch, so that a
// kernel too large for the device is refused with one line (a UsageError: exit 2 in a stage's
// main, a `skipped` row inside a sweep) instead of failing its launch.
//
// What one block may ask for (cudaDevAttrMaxSharedMemoryPerBlockOptin; CUDA C++ Programming
// Guide, table "Technical Specifications per Compute Capability"): 64 KiB on Turing (sm_75),
// 163 KiB on the A100 (sm_80), 99 KiB on sm_86/sm_89 (RTX 30xx/40xx, A10, L4), 227 KiB on
// Hopper (sm_90). Above 48 KiB a kernel must opt in (cudaFuncAttributeMaxDynamicSharedMemorySize).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "fa/cuda/check.cuh"

namespace fa {

// The most shared memory (bytes) one block may opt in to on the current device; 0 without a
// usable device (the caller then leaves the refusal to the harness's skip).
inline long long shared_memory_per_block_optin() {
  int device = 0, bytes = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    cudaGetLastError();  // clear it: the harness reports the missing device its own way
    return 0;
  }
  return bytes;
}

// Empty when a block of `bytes` shared memory fits on the current device (or there is no usable
// device); otherwise one line: "<what> needs 112 KiB of shared memory per block; device 0 (Tesla
// T4, sm_75) gives at most 64 KiB".
inline std::string shared_memory_refusal(long long bytes, const std::string& what) {
  const long long limit = shared_memory_per_block_optin();
  if (limit == 0 || bytes <= limit) return "";
  int device = 0;
  cudaGetDevice(&device);
  cudaDeviceProp prop{};
  const std::string name =
      cudaGetDeviceProperties(&prop, device) == cudaSuccess
          ? std::string(prop.name) + ", sm_" + std::to_string(prop.major) + std::to_string(prop.minor)
          : std::string("unknown");
  auto kib = [](long long b) {
    return b % 1024 == 0 ? std::to_string(b / 1024) : std::to_string(b / 1024) + "." + std::to_string(b % 1024 * 10 / 1024);
  };
  return what + " needs " + kib(bytes) + " KiB of shared memory per block; device " + std::to_string(device) + " (" +
         name + ") gives at most " + kib(limit) + " KiB";
}

// Opts `kernel` in to `bytes` of dynamic shared memory (above 48 KiB a kernel must) and asks for
// the largest shared-memory carveout, so that two such blocks fit an SM where they can; once per
// instantiation and device. The attributes belong to the kernel on the device current at the call
// and stay set for the process; stage 13 launches the same kernels on several devices, hence one
// bit per device (devices 0-63).
template <auto kernel, int bytes>
void opt_in_shared_memory_once() {
  static std::atomic<std::uint64_t> done{0};
  int device = 0;
  FA_CUDA_CHECK(cudaGetDevice(&device));
  const std::uint64_t bit = std::uint64_t{1} << (device & 63);
  if (done.load(std::memory_order_acquire) & bit) return;
  FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     cudaSharedmemCarveoutMaxShared));
  done.fetch_or(bit, std::memory_order_release);  // two threads racing here set the same values twice
}

}  // namespace fa
