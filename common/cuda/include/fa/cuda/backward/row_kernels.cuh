// row_kernels.cuh — the two small kernels around a key-tile backward kernel (stages 08 and 10;
// frame.cuh launches them): before it, D and LSE·log2e of every query row; after it, dQ's float32
// sum converted to the inputs' type. Both only move memory (O and dO read, the float32 dQ read and
// written back in 16 bits), so they are written for bandwidth: 16-byte loads where the rows allow
// them, a plain one-element version beside each for the rest.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace fa::bwd {

// A query row's LSE·log2(e); a row that sees no key (LSE = −inf) gets +inf, so that P = 0 there.
__device__ inline float row_lse2(float lse) { return lse == -INFINITY ? INFINITY : lse * 1.4426950408889634f; }

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
    l2 = row_lse2(lse[head * seq_q + i]);
  }
  if (lane == 0) {
    lse2[row] = l2;
    delta[row] = sum;
  }
}

// The same with 16-byte loads, for D = 32, 64, 128 and 256 and 16-byte aligned O and dO: D / 8
// threads per row, each reading 8 elements of O and of dO at once (512 bytes per load of a warp,
// where the kernel above asks for 64: at D = 64 it reads a row's 128 bytes of O and of dO in four
// loads), then the row's partial sums added across its D / 8 neighbouring lanes.
template <class T, int D>
__global__ void preprocess_wide_kernel(const T* o, const T* d_o, const float* lse, float* lse2, float* delta,
                                       long long heads, int seq_q, int seq_q_padded) {
  constexpr int kLanes = D / 8;  // threads per row: a power of two that divides 32
  static_assert(kLanes >= 1 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0, "D / 8 threads per row within a warp");
  const long long thread = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long row = thread / kLanes;
  const int part = static_cast<int>(thread % kLanes);
  // No early return: every lane of the warp takes part in the shuffles below.
  const bool in_range = row < heads * seq_q_padded;
  const long long head = row / seq_q_padded;
  const int i = static_cast<int>(row % seq_q_padded);
  float sum = 0.0f;
  if (in_range && i < seq_q) {
    const long long at = (head * seq_q + i) * D + 8 * part;
    const uint4 o8 = *reinterpret_cast<const uint4*>(o + at), d_o8 = *reinterpret_cast<const uint4*>(d_o + at);
    const T* oe = reinterpret_cast<const T*>(&o8);
    const T* de = reinterpret_cast<const T*>(&d_o8);
#pragma unroll
    for (int e = 0; e < 8; ++e) sum = fmaf(static_cast<float>(oe[e]), static_cast<float>(de[e]), sum);
  }
#pragma unroll
  for (int off = kLanes / 2; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (in_range && part == 0) {
    lse2[row] = i < seq_q ? row_lse2(lse[head * seq_q + i]) : INFINITY;
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

// The same four elements at a time (n a multiple of 4, both arrays 16-byte aligned): one 16-byte
// load and one 8-byte store each.
template <class T>
__global__ void convert_dq_wide_kernel(const float4* dq_accum, T* dq, long long n4, float scale) {
  struct alignas(4 * sizeof(T)) Four {
    T e[4];
  };
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n4;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const float4 v = dq_accum[i];
    const Four f{{static_cast<T>(v.x * scale), static_cast<T>(v.y * scale), static_cast<T>(v.z * scale),
                  static_cast<T>(v.w * scale)}};
    reinterpret_cast<Four*>(dq)[i] = f;
  }
}

}  // namespace fa::bwd
