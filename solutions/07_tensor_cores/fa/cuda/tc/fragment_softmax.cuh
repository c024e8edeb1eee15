// fragment_softmax.cuh — the online softmax of stage 02, done on the tensor cores' accumulator
// registers (the mma.sync C fragment, fa/cuda/ptx/mma.cuh), for one 16-row slice of a warp.
//
// After S = Q·Kᵀ for one K tile of Bc keys, a thread holds s[n][0..3] for each 8-key column tile n:
//
//        keys  8n+2t  8n+2t+1                    g = lane / 4, t = lane % 4
//   row g      s[n][0]  s[n][1]
//   row g + 8  s[n][2]  s[n][3]
//
// so it owns two rows (r = 0: row g, r = 1: row g + 8), 2·NT values of each, and shares each row
// with the 3 other threads of its group (lanes 4g .. 4g+3). A row's max is therefore the max of
// the thread's own values, then of the group's: two butterfly shuffles (xor 1, xor 2). The sum l
// is kept per thread (a partial over its own columns) and summed across the group once, at the
// end (the factor alpha that rescales it is the same for the 4 threads), which saves two shuffles
// per row per tile.
//
// Scores are raw (S = Q·Kᵀ, not scaled): m is the max of raw scores, and the scale τ and log2(e)
// are folded into one multiply-add per score, P = 2^(s·τlog2e − m·τlog2e), one FFMA and one
// MUFU.EX2 (fa::ptx::ex2). Masked scores are −inf; a row that has seen only −inf keeps m = −inf,
// and subtracts 0 instead, so that 2^(−inf − (−inf)) = NaN never happens: its P are 0, alpha is 0.
//
// Exercise 07 (exercises/07_tensor_cores/) is this function with its two regions as holes.
#pragma once

#include <cmath>

#include "fa/cuda/ptx/mma.cuh"

namespace fa::tc {

// One tile's update for the two rows a thread holds in one 16-row slice. In: s, the raw scores of
// the tile (masked ones −inf); m, l, the rows' running max and this thread's partial sum. Out: s
// overwritten by P = 2^(s·τlog2e − m_new·τlog2e); m, l updated; alpha[r] = 2^((m_old − m_new)·τlog2e),
// the factor the caller multiplies row r of its O accumulator by.
template <int NT>
__device__ __forceinline__ void online_softmax(float (&s)[NT][4], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                               float scale_log2) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float m_new = m[r];
    // >>> ex07:row_max
#pragma unroll
    for (int n = 0; n < NT; ++n) m_new = fmaxf(m_new, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
    m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 1));
    m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 2));
    // <<< ex07:row_max
    // >>> ex07:exp_and_sum
    // Both scaled maxima rounded alike (__fmul_rn is never fused into an FMA): a max that did not
    // move gives alpha = 2^0 = 1 exactly. Written m[r] * scale_log2 - base, the compiler fuses it
    // into fma(m, c, −round(m·c)), the rounding error of m·c: alpha = 1 ± 3e-7 at every tile, and l
    // drifts with the number of tiles (measured: LSE off by 4.6e-5 at N = 16k, chapter 07).
    const float base = m_new == -INFINITY ? 0.0f : __fmul_rn(m_new, scale_log2);
    alpha[r] = ptx::ex2(__fmul_rn(m[r], scale_log2) - base);
    m[r] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      s[n][2 * r] = ptx::ex2(fmaf(s[n][2 * r], scale_log2, -base));
      s[n][2 * r + 1] = ptx::ex2(fmaf(s[n][2 * r + 1], scale_log2, -base));
      sum += s[n][2 * r] + s[n][2 * r + 1];
    }
    l[r] = l[r] * alpha[r] + sum;
    // <<< ex07:exp_and_sum
  }
}

// The group's total of a per-thread partial sum (the end of the loop: l of each row).
__device__ __forceinline__ float group_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace fa::tc
