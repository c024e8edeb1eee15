// Exercise 04 — the starter of stage 04's hole online_softmax_tile.cuh: the online softmax inside
// the fused kernel's K/V tile loop, and the final normalization.
//
// Stage 04's kernel (steps/04_cuda_flash_forward/flash_forward_kernel.cuh) includes this file as
// <online_softmax_tile.cuh> and calls the two functions below; the exercise builds it with this
// folder first on the include path, so the stage's kernel runs your code. Each hole sits between
// `// >>> ex04:TAG` and `// <<< ex04:TAG`: replace the fa::device_todo(...) line with your code
// and leave the markers. Read the kernel's header in the stage file first: the tile picture, which
// thread owns which scores (rows ty + 8i, keys tx + 16j) and which columns of O.
//
//   ex04:online_softmax  for each of the thread's 8 rows i, fold this tile's scores s[i][0..3]
//                        (in log2 units: S' = log2(e)·S) into m[i], l[i], o[i][..] (FA2):
//                          tile max over the row: the thread's 4, then the 16 threads that share
//                            the row (__shfl_xor_sync with lane masks 1, 2, 4, 8)
//                          m_new = max(m[i], tile max); alpha = exp2f(m[i] − m_new)
//                          s[i][j] = exp2f(s[i][j] − m_new)  (P̃, which the kernel then stores)
//                          l[i] = alpha·l[i] + (this thread's 4 P̃: the row is summed at the end)
//                          o[i][c] *= alpha; m[i] = m_new
//                        and a row that has seen no key yet (m_new = −inf) must not compute
//                        −inf − (−inf) = NaN: subtract 0 instead.
//   ex04:finish          once per row: l summed across the row's 16 threads, O = Õ / l written
//                        (float4 or float2 per chunk of the thread's columns), LSE = ln 2 · (m + log2 l)
//                        by one thread (tx == 0); a row that saw no key: O = 0, LSE = −inf. Skip the
//                        padding rows (row ≥ Nq) — after the shuffles, which every lane must join.
//
// Device code cannot throw, so a hole calls fa::device_todo("ex04:TAG", "...") (fa/cuda/device_todo.cuh):
// it records the first hole a thread reached, and after each check the reporter names it.
//
// Check your work (needs a CUDA GPU; without one the checks report "skipped"):
//   ./course check ex04        (or: cmake --build build --target check_ex04)
// The chapter is docs/04_cuda_flash_forward.md; the answer is
// solutions/04_cuda_flash_forward/online_softmax_tile.cuh.
//
// What you should see when it passes (on a GPU): four `ok` lines, then `4 of 4 checks pass.`
// Without a GPU the checks report skipped (exit 77): that is not a pass.
// Stuck? `./course hint ex04` shows a hint, one at a time (3 in all, each nearer the code).
// Common mistakes: the folded log2 scale (using expf or logf here, or multiplying by τ again:
// the scores already are log2(e)·τ·QKᵀ); reducing l across threads every tile (sum it once, at
// the end: its partials all get the same alpha); skipping a shuffle on padding rows (every lane
// must join); a row that saw no key: O = 0 and LSE = −inf.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fa/cuda/device_todo.cuh"

namespace fa::step04::detail {

// Folds one tile of scores s (log2 units, masked keys at −inf) into the rows' m, l and Õ; after
// it, s holds P̃.
template <int kCols>
__device__ __forceinline__ void online_softmax_tile(float (&s)[kRowsPerThread][kKeysPerThread], float (&m)[kRowsPerThread],
                                                    float (&l)[kRowsPerThread], float (&o)[kRowsPerThread][kCols]) {
  // >>> ex04:online_softmax
  fa::device_todo("ex04:online_softmax", "for each of the thread's 8 rows: the tile max (4 scores, then the 16 threads "
                                         "of the row), m_new, alpha = exp2f(m - m_new), s = exp2f(s - m_new), l and o "
                                         "rescaled by alpha, m = m_new (subtract 0 for a row that has seen no key)");
  // <<< ex04:online_softmax
}

// Once per row, after the last tile: O and LSE of the thread's rows to device memory.
template <int D, class Cols = OutCols<D>>
__device__ __forceinline__ void finish_rows(const float (&o)[kRowsPerThread][Cols::kCount], const float (&m)[kRowsPerThread],
                                            const float (&l)[kRowsPerThread], const KernelArgs& a, std::int64_t bh, int i0,
                                            int ty, int tx) {
  // >>> ex04:finish
  fa::device_todo("ex04:finish", "once per row: l summed across the row's 16 threads, O = o / l written for rows < "
                                 "Nq, LSE = ln 2 * (m + log2 l) by tx == 0; a row that saw no key: O = 0, LSE = -inf");
  // <<< ex04:finish
}

}  // namespace fa::step04::detail
