// resident_blocks.cuh — how many blocks of a kernel the GPU runs at once (SMs × blocks per SM, from
// the occupancy API), for launches that size their grid, or plan their last wave, by it (stage 10's
// rung 14, stage 11's split decoding).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "fa/cuda/check.cuh"
#include "fa/cuda/device.cuh"
#include "fa/cuda/shared_memory.cuh"

namespace fa {

// Measured on the current device once per process (the course's multi-GPU stage runs on GPUs of one
// kind). opt_in: the most shared memory any launch of kernel asks for (opting in with less would
// lower the kernel's limit for them).
template <auto kernel, int threads, int smem, int opt_in = smem>
std::int64_t resident_blocks() {
  static const std::int64_t slots = [] {
    opt_in_shared_memory_once<kernel, opt_in>();
    int per_sm = 0;
    FA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
    return static_cast<std::int64_t>(std::max(per_sm, 1)) * current_sm_count();
  }();
  return slots;
}

}  // namespace fa
