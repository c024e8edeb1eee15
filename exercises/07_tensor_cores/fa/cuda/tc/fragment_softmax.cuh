// Exercise 07 — the starter of the hole fa/cuda/tc/fragment_softmax.cuh: the online softmax on the
// tensor cores' accumulator registers, for the 16 rows of one warp.
//
// Stage 07's kernel (steps/07_tensor_cores/flash_tc_kernel.cuh) includes this header as
// <fa/cuda/tc/fragment_softmax.cuh>; the exercise builds the stage (tensor_cores.cu) with this
// folder first on the include path, so the real kernel runs your online_softmax. Fill in the two
// holes, in order, between `// >>> ex07:TAG` and `// <<< ex07:TAG` (leave the markers: the course
// check and ./course check read them). After an mma.sync m16n8k16, with g = lane / 4 and
// t = lane % 4, a thread holds s[n][0], s[n][1] = row g, keys 8n + 2t and 8n + 2t + 1 of the tile,
// and s[n][2], s[n][3] = the same keys of row g + 8. Row r of the function (0: row g, 1: row g + 8)
// is s[n][2r], s[n][2r + 1] for n < NT; the other three threads of the group (lanes 4g .. 4g + 3)
// hold the rest of the row.
//
//   ex07:row_max      m_new = the max of m[r] and of row r's scores in this tile: first over the
//                     thread's own 2·NT values, then across its group (two __shfl_xor_sync).
//   ex07:exp_and_sum  base = m_new·scale_log2, or 0 when m_new = −inf (a row that has seen only
//                     masked scores); alpha[r] = 2^(m[r]·scale_log2 − base), with the OLD m[r];
//                     then m[r] = m_new; each of row r's scores s → P = 2^(s·scale_log2 − base),
//                     in place (fa::ptx::ex2); l[r] = alpha[r]·l[r] + the sum of this thread's P.
//                     l stays a per-thread partial: the kernel sums the group once, at the end.
//
// Device code cannot throw, so a hole calls fa::device_todo (fa/cuda/device_todo.cuh): the first
// thread to reach it records it, and the checks name it after they fail.
// Check your work: ./course check ex07 (or cmake --build build --target check_ex07). Needs a GPU of
// compute capability 8.0 or newer; without one the checks report skipped (exit 77), not a pass.
// The chapter is docs/07_tensor_cores.md; the answer is solutions/07_tensor_cores/fa/cuda/tc/.
//
// What you should see when it passes: four `ok` lines, then `4 of 4 checks pass.`
// Stuck? `./course hint ex07` shows a hint, one at a time (3 in all, each nearer the code).
// Common mistakes: alpha = ex2(m[r] * scale_log2 - base): the compiler fuses it into an FMA whose
// result is the rounding error of m·scale_log2, not 0, so alpha = 1 ± 3e-7 at every tile and l
// drifts; the max over the thread's own values only (no shuffles: the four threads of a row then
// disagree on m, and on alpha); shuffling with xor 4, 8 or 16, which reaches other groups, that is
// other rows; subtracting m = −inf for a row that has seen only masked scores (−inf − (−inf) =
// NaN); updating m[r] before alpha is computed from the old one; summing l across the group in
// every tile (it must stay a partial: group_sum adds the four at the end); forgetting to rescale l
// by alpha.
#pragma once

#include <cmath>

#include "fa/cuda/device_todo.cuh"
#include "fa/cuda/ptx/mma.cuh"
#include "fa/exercise.hpp"

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
    fa::device_todo("ex07:row_max", "m_new = max(m[r], row r's scores s[n][2r], s[n][2r+1] of this tile), then "
                                    "across the 4 threads of the group (__shfl_xor_sync with 1 and 2)");
    // <<< ex07:row_max
    // >>> ex07:exp_and_sum
    fa::device_todo("ex07:exp_and_sum", "base = __fmul_rn(m_new, scale_log2) (0 when m_new = -inf), alpha[r] = "
                                        "ex2(__fmul_rn(m[r], scale_log2) - base), m[r] = m_new, s = ex2(s * scale_log2 "
                                        "- base), l[r] = alpha[r] * l[r] + this thread's sum of P");
    alpha[r] = fa::kTodoNaN;
    // <<< ex07:exp_and_sum
  }
}

// The group's total of a per-thread partial sum (the end of the loop: l of each row).
__device__ __forceinline__ float group_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace fa::tc
