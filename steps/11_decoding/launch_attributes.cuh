// launch_attributes.cuh — stage 11's host helpers that both the decoding launch (inference.cu) and
// the plain read of the cache (lab/read_cache.cu) use: a launch that may overlap the kernel before
// it in the stream (programmatic dependent launch), and how many blocks of a kernel the GPU holds.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "fa/cuda/check.cuh"
#include "fa/cuda/device.cuh"
#include "fa/cuda/shared_memory.cuh"
#include "fa/stage.hpp"

namespace fa::step11 {

// A launch's programmatic-stream-serialization attribute: the kernel may start before the one ahead
// of it in the stream has finished (grid_dependency.cuh says what it may do until then).
inline cudaLaunchAttribute overlapping_previous() {
  cudaLaunchAttribute overlap{};
  overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap.val.programmaticStreamSerializationAllowed = 1;
  return overlap;
}

inline void require_overlap_support(const char* who) {
  if (current_compute_capability() < 90)
    throw UsageError(std::string(who) + ": overlap_previous (programmatic dependent launch) needs compute capability 9.0");
}

// Blocks of kernel the GPU runs at once (SMs × blocks per SM), measured by the occupancy API on the
// current device, once per process (the course's multi-GPU stage runs on GPUs of one kind).
// opt_in: the most shared memory any launch of kernel asks for (opting in with less would lower
// the kernel's limit for them).
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

}  // namespace fa::step11
