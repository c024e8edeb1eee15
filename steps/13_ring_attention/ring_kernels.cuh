// ring_kernels.cuh — stage 13's small kernels around the attention kernels of stages 07-09: the
// merge of one block's (O_b, LSE_b) into a rank's running (O, LSE) (ring_merge.hpp's merge_row, a
// warp per row), and the element-wise conversions and sums the backward's accumulators need. All
// are memory-bound and small beside a block's attention: a block of c keys costs 4·c²·H·D FLOPs,
// its merge reads and writes about 14·c·H·D bytes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include <ring_merge.hpp>  // the hole of exercise ex13 (holes/)
#include "fa/cuda/dtype.cuh"

namespace fa::step13 {

// rows query rows of D values: o_acc/lse_acc (float32) absorb o_b (the block's O, 16-bit) and lse_b.
// A warp per row; lane l merges the D/32 columns [l·D/32, (l+1)·D/32) with merge_row (the weights
// depend only on the two LSEs, so the lanes agree), and lane 0 stores the new LSE.
template <class T, int D>
__global__ void merge_block_kernel(float* __restrict__ o_acc, float* __restrict__ lse_acc, const T* __restrict__ o_b,
                                   const float* __restrict__ lse_b, std::int64_t rows) {
  static_assert(D % 32 == 0, "a lane takes D/32 columns");
  constexpr int kPerLane = D / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < rows; row += warps) {
    float lse = lse_acc[row];
    float o_b_part[kPerLane];
    for (int c = 0; c < kPerLane; ++c) o_b_part[c] = static_cast<float>(o_b[row * D + lane * kPerLane + c]);
    merge_row(o_acc + row * D + lane * kPerLane, lse, o_b_part, lse_b[row], kPerLane);
    __syncwarp();  // every lane has read the old LSE before lane 0 overwrites it
    if (lane == 0) lse_acc[row] = lse;
  }
}

// out[i] = value (float32): the running LSE starts at −inf, accumulators at 0.
__global__ void fill_kernel(float* __restrict__ out, float value, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = value;
}

// acc[i] += add[i]: a pair's 16-bit dQ, dK or dV into a float32 accumulator (T = __half or
// __nv_bfloat16), or a travelling float32 dK/dV into this rank's (T = float).
template <class T>
__global__ void accumulate_kernel(float* __restrict__ acc, const T* __restrict__ add, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    acc[i] += static_cast<float>(add[i]);
}

// out[i] = round(in[i]) to T: a float32 accumulator to the stage's 16-bit output, once, at the end.
template <class T>
__global__ void round_kernel(T* __restrict__ out, const float* __restrict__ in, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = static_cast<T>(in[i]);  // round to nearest, as stage 11's merge
}

}  // namespace fa::step13
