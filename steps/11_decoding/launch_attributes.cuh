// launch_attributes.cuh — stage 11's host helpers that both the decoding launch (inference.cu) and
// the plain read of the cache (lab/read_cache.cu) use: a launch that may overlap the kernel before
// it in the stream (programmatic dependent launch); how many blocks of a kernel the GPU holds is
// common's (fa/cuda/resident_blocks.cuh), included here for both.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "fa/cuda/check.cuh"
#include "fa/cuda/device.cuh"
#include "fa/cuda/resident_blocks.cuh"
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

}  // namespace fa::step11
