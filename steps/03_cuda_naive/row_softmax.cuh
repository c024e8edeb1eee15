// row_softmax.cuh — stage 03's second kernel: P = softmax(S), one row per thread block, and LSE.
//
// Stage 02 built the row max m and the row sum l up tile by tile (the online softmax). Here S is
// already complete in device memory, so the classic three passes over one row are enough:
//
//   m_i   = max_j S_ij                      over the keys j that row i sees (j < keys_visible(i))
//   l_i   = Σ_j exp(S_ij − m_i)             every exponent ≤ 0: no overflow, even at S ≈ 200
//   P_ij  = exp(S_ij − m_i) / l_i           0 for the keys row i does not see
//   LSE_i = m_i + log l_i                   −inf for a row that sees no key (and then P_i = 0)
//
// The picture: block b owns row b of the [B·H·Nq, Nk] matrix S; its 256 threads stride along the
// row, each folding every 256th element into its own partial max (then sum), and the block
// combines the partials (block_reduce_*, below):
//
//        S row b:  | t0 t1 t2 … t255 | t0 t1 t2 … t255 | t0 t1 … (tail: j < Nk guarded)
//                    ─► 256 partial maxes ─► warp shuffles ─► 8 warp maxes ─► one m_i
//
// Consecutive threads read consecutive floats: every pass is coalesced. The row is read three
// times (max, sum, write) and written once. Measured on an H100 (docs/03_cuda_naive.md): up to
// Nk = 4096 (16 KiB rows) it moves S in and P out at ~2.0 TB/s, as if each row were read once (the
// re-reads, most likely, hit L2); at Nk ≥ 8192 at ~1.2 TB/s. One pass over HBM is left as an
// exercise in the chapter's "what to try next".
//
// This kernel is also exercise ex03 (exercises/03_cuda_naive/row_softmax_exercise.cu): the regions
// marked ex03:… are the holes; their text here and in the solution is the same.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "fa/cuda/check.cuh"
#include "fa/problem.hpp"

namespace fa::step03 {

inline constexpr int kSoftmaxThreads = 256;  // 8 warps per row; enough to keep a 4 KiB+ row busy

// Keys that query row i sees: all Nk, or (causal, aligned to the bottom-right corner) the keys
// j ≤ i + (Nk − Nq), clamped to [0, Nk]. The same rule as Problem::keys_visible, on the device.
__device__ inline std::int64_t keys_visible_device(std::int64_t i, std::int64_t nq, std::int64_t nk, bool causal) {
  if (!causal) return nk;
  const std::int64_t last = i + (nk - nq);  // the last key row i sees; < 0: none
  return last < 0 ? 0 : (last + 1 < nk ? last + 1 : nk);
}

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

// s, pr: [rows, nk] with rows = B·H·Nq, row r = (b·H + h)·Nq + i; lse: [rows].
__global__ void __launch_bounds__(kSoftmaxThreads)
row_softmax_kernel(const float* __restrict__ s, float* __restrict__ pr, float* __restrict__ lse,
                   std::int64_t nq, std::int64_t nk, bool causal) {
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const std::int64_t i = row % nq;  // the query position within its head: what the mask needs
  const std::int64_t visible = keys_visible_device(i, nq, nk, causal);
  const float* s_row = s + row * nk;
  float* p_row = pr + row * nk;

  float m = -INFINITY;  // the row max m_i; stays −inf for a row that sees no key
  // >>> ex03:row_max
  for (std::int64_t j = threadIdx.x; j < visible; j += blockDim.x) m = fmaxf(m, s_row[j]);
  m = block_reduce_max(m, scratch);
  // <<< ex03:row_max

  float l = 0.0f;  // the row sum l_i = Σ_j exp(S_ij − m_i); stays 0 for a row that sees no key
  // >>> ex03:row_sum
  for (std::int64_t j = threadIdx.x; j < visible; j += blockDim.x) l += expf(s_row[j] - m);
  l = block_reduce_sum(l, scratch);
  // <<< ex03:row_sum

  // >>> ex03:write_p
  // Every column is written, the masked ones with 0, so PV can sum over all Nk keys. A row that
  // sees no key never evaluates exp(−inf − (−inf)) = NaN: its loop above was empty.
  const float inv_l = visible > 0 ? 1.0f / l : 0.0f;
  for (std::int64_t j = threadIdx.x; j < nk; j += blockDim.x)
    p_row[j] = j < visible ? expf(s_row[j] - m) * inv_l : 0.0f;
  if (threadIdx.x == 0) lse[row] = visible > 0 ? m + logf(l) : -INFINITY;
  // <<< ex03:write_p
}

// One block per row of S. Rows go along grid.x (up to 2³¹ − 1 of them).
inline void launch_row_softmax(const Problem& p, const float* s, float* pr, float* lse, cudaStream_t stream) {
  const std::int64_t rows = p.batch * p.heads * p.seq_q;
  if (rows > 2147483647) throw UsageError("B·H·Nq = " + std::to_string(rows) + " rows: more than one grid holds");
  row_softmax_kernel<<<static_cast<unsigned>(rows), kSoftmaxThreads, 0, stream>>>(s, pr, lse, p.seq_q, p.seq_k,
                                                                                  p.causal);
}

}  // namespace fa::step03
