// row_passes.cuh — stage 03's hole: the three passes of the row softmax over one row of S, run by
// the whole thread block (row_softmax.cuh's kernel calls them, one row per block).
//
//   row_max    m_i   = max_j S_ij            over the keys j < visible that row i sees
//   row_sum    l_i   = Σ_j exp(S_ij − m_i)
//   write_row  P_ij  = exp(S_ij − m_i) / l_i for j < visible, 0 up to Nk; LSE_i = m_i + log l_i
//
// The block's 256 threads stride along the row (thread t takes j = t, t + 256, ...), then combine
// their partials with block_reduce_max/sum. Kept apart from the kernel, which includes it as
// <row_passes.cuh>, because it is exercise ex03: the learner's copy
// (exercises/03_cuda_naive/row_passes.cuh) has the three marked regions emptied, and the exercise
// builds stage 03's kernel against it.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "03_cuda_naive/block_reduce.cuh"

namespace fa::step03 {

// The row max m_i over the keys j < visible, returned to every thread; −inf when visible = 0.
__device__ inline float row_max(const float* s_row, std::int64_t visible, float* scratch) {
  float m = -INFINITY;
  // >>> ex03:row_max
  for (std::int64_t j = threadIdx.x; j < visible; j += blockDim.x) m = fmaxf(m, s_row[j]);
  m = block_reduce_max(m, scratch);
  // <<< ex03:row_max
  return m;
}

// The row sum l_i = Σ_j exp(S_ij − m_i) over the same keys, returned to every thread; 0 when
// visible = 0.
__device__ inline float row_sum(const float* s_row, std::int64_t visible, float m, float* scratch) {
  float l = 0.0f;
  // >>> ex03:row_sum
  for (std::int64_t j = threadIdx.x; j < visible; j += blockDim.x) l += expf(s_row[j] - m);
  l = block_reduce_sum(l, scratch);
  // <<< ex03:row_sum
  return l;
}

// P for every key of the row (0 for the masked ones) and the row's LSE, written by one thread.
__device__ inline void write_row(const float* s_row, float* p_row, float* lse, std::int64_t row,
                                 std::int64_t visible, std::int64_t nk, float m, float l) {
  // >>> ex03:write_p
  // Every column is written, the masked ones with 0, so PV can sum over all Nk keys. A row that
  // sees no key never evaluates exp(−inf − (−inf)) = NaN: its loops above were empty.
  const float inv_l = visible > 0 ? 1.0f / l : 0.0f;
  for (std::int64_t j = threadIdx.x; j < nk; j += blockDim.x)
    p_row[j] = j < visible ? expf(s_row[j] - m) * inv_l : 0.0f;
  if (threadIdx.x == 0) lse[row] = visible > 0 ? m + logf(l) : -INFINITY;
  // <<< ex03:write_p
}

}  // namespace fa::step03
