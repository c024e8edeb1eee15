// row_kernels.cuh — the two small kernels around a key-tile backward kernel (stages 08 and 10;
// frame.cuh launches them): before it, D and LSE·log2e of every query row; after it, dQ's float32
// sum converted to the inputs' type.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace fa::bwd {

// D_i = rowsum(dO ∘ O) and LSE_i·log2(e) per query row, one warp per row, padded to kRowPadding rows
// per head: the padding and the rows that see no key get LSE·log2e = +inf (so that P = 0 there) and D = 0.
template <class T>
__global__ void preprocess_kernel(const T* o, const T* d_o, const float* lse, float* lse2, float* delta,
                                  long long heads, int seq_q, int seq_q_padded, int D) {
  const long long row = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= heads * seq_q_padded) return;
  const long long head = row / seq_q_padded;
  const int i = static_cast<int>(row % seq_q_padded);
  float sum = 0.0f, l2 = INFINITY;
  if (i < seq_q) {
    const long long at = (head * seq_q + i) * D;
    for (int d = lane; d < D; d += 32)
      sum = fmaf(static_cast<float>(o[at + d]), static_cast<float>(d_o[at + d]), sum);
#pragma unroll
    for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    const float l = lse[head * seq_q + i];
    if (l != -INFINITY) l2 = l * 1.4426950408889634f;
  }
  if (lane == 0) {
    lse2[row] = l2;
    delta[row] = sum;
  }
}

// dQ = τ·(the float32 sum) in the inputs' type.
template <class T>
__global__ void convert_dq_kernel(const float* dq_accum, T* dq, long long n, float scale) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    dq[i] = static_cast<T>(dq_accum[i] * scale);
}

}  // namespace fa::bwd
