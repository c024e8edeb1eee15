// block_reduce.cuh — stage 03's block-wide reductions: the max or the sum of one value per thread,
// returned to every thread of the block. The row-softmax passes (holes/row_passes.cuh) use them.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace fa::step03 {

// The max (or sum) of one value per thread over the whole block, returned to every thread.
// Warp shuffles first (no shared memory, no barrier), then one value per warp through `scratch`.
// `scratch` holds 32 floats; the barriers make it reusable by the next call.
__device__ inline float warp_reduce_max(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}
__device__ inline float warp_reduce_sum(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}
__device__ inline float block_reduce_max(float x, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = warp_reduce_max(x);
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < warps ? scratch[lane] : -INFINITY;
  x = warp_reduce_max(x);
  __syncthreads();  // every thread has read scratch before the next call writes it
  return x;
}
__device__ inline float block_reduce_sum(float x, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = warp_reduce_sum(x);
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < warps ? scratch[lane] : 0.0f;
  x = warp_reduce_sum(x);
  __syncthreads();
  return x;
}

}  // namespace fa::step03
