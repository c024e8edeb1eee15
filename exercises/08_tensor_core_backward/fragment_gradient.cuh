// Exercise 08 — the starter of stage 08's hole fragment_gradient.cuh: the softmax's gradient on the
// tensor cores' accumulator registers, transposed: Pᵀ recomputed from the saved LSE, and
// dSᵀ = Pᵀ ∘ (dPᵀ − D), for the 16 keys of one warp's row block and one tile of queries.
//
// Stage 08's key-tile kernel (steps/08_tensor_core_backward/backward_tc_kernel.cuh) includes this
// file as <fragment_gradient.cuh>; the exercise builds the stage (tensor_core_backward.cu) with this
// folder first on the include path, so the real kernel runs your function. It runs it wherever a
// warp computes both Sᵀ and dPᵀ: D = 32, 64, 96 (at D = 128 and 256 a pair of warps divides that
// work, with the two helpers below the holes). Fill in the two holes, in order, between
// `// >>> ex08:TAG` and `// <<< ex08:TAG` (leave the markers: the course check and ./course check
// read them). The kernel computes Sᵀ = K Qᵀ, not S: keys are the rows of the accumulator and
// queries its columns. With g = lane / 4 and t = lane % 4, a thread holds st[n][0], st[n][1] =
// key g, queries 8n + 2t and 8n + 2t + 1 of the tile, and st[n][2], st[n][3] = the same queries of
// key g + 8 (dpt likewise).
//
//   ex08:query_numbers  l2 and dd: the LSE·log2e and the D of this thread's two queries of column
//                       tile n (lse2[8n + 2t], lse2[8n + 2t + 1], and delta likewise), as two
//                       float2 (the arrays are in shared memory, 8-byte aligned at every even index).
//   ex08:p_and_ds       for the element e: P = 2^(st·scale_log2 − LSE·log2e of ITS query)
//                       (fa::ptx::ex2), written over st[n][e]; dS = P·(dpt[n][e] − D of its query),
//                       written over dpt[n][e]. Which query is element e's? (e & 1: the odd column.)
//
// Device code cannot throw, so a hole calls fa::device_todo (fa/cuda/device_todo.cuh): the first
// thread to reach it records it, and the checks name it after they fail.
// Check your work: ./course check ex08 (or cmake --build build --target check_ex08). Needs a GPU of
// compute capability 8.0 or newer; without one the checks report skipped (exit 77), not a pass.
// The chapter is docs/08_tensor_core_backward.md; the answer is solutions/08_tensor_core_backward/.
//
// What you should see when it passes: three `ok` lines, then `3 of 3 checks pass.`
// Stuck? `./course hint ex08` shows a hint, one at a time (3 in all, each nearer the code).
// Common mistakes: indexing the LSE by the key (g, g + 8: the layout of stage 07, where rows were
// queries); lse2[n] or lse2[8n + t] (the thread's columns are 2t and 2t + 1); the natural exp with
// the log2 scale (P = exp(s·τ − LSE) is the same number, but the forward saved LSE·log2e for ex2);
// computing dS from the old dpt after it was overwritten, or from st after it became P (dS needs
// P and dP: P is the new st, dP the old dpt); subtracting D from P instead of from dP.
#pragma once

#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "fa/cuda/device_todo.cuh"
#include "fa/cuda/ptx/mma.cuh"
#include "fa/exercise.hpp"

namespace fa::step08 {

// In: st, dpt, one row block's raw scores Sᵀ (masked ones −inf) and dPᵀ; lse2 and delta, the query
// tile's LSE·log2e and D from the first of this warp's queries. Out: st = Pᵀ, dpt = dSᵀ.
template <int NQ>
__device__ __forceinline__ void probabilities_and_score_gradient(float (&st)[NQ][4], float (&dpt)[NQ][4],
                                                                 const float* lse2, const float* delta,
                                                                 float scale_log2) {
  const int t = static_cast<int>(threadIdx.x) % 4;
#pragma unroll
  for (int n = 0; n < NQ; ++n) {
    // >>> ex08:query_numbers
    fa::device_todo("ex08:query_numbers", "l2 = the float2 at lse2 + 8n + 2t, dd = the float2 at delta + 8n + 2t: "
                                          "the LSE*log2e and D of this thread's two queries of column tile n");
    const float2 l2 = make_float2(fa::kTodoNaN, fa::kTodoNaN), dd = l2;
    // <<< ex08:query_numbers
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      // >>> ex08:p_and_ds
      fa::device_todo("ex08:p_and_ds", "P = ex2(st * scale_log2 - the LSE*log2e of element e's query (l2.x or l2.y by "
                                       "e & 1)) over st[n][e]; dS = P * (dpt[n][e] - its D) over dpt[n][e]");
      st[n][e] = dpt[n][e] = fa::kTodoNaN + l2.x + dd.x;
      // <<< ex08:p_and_ds
    }
  }
}

// The same two steps for a pair of warps that divides the products (BackwardConfig::kSplit = 2):
// the S warp, which has Sᵀ, makes Pᵀ; the dP warp, which has dPᵀ, makes dSᵀ from the Pᵀ it reads
// back from shared memory.
template <int NQ>
__device__ __forceinline__ void probabilities(float (&st)[NQ][4], const float* lse2, float scale_log2) {
  const int t = static_cast<int>(threadIdx.x) % 4;
#pragma unroll
  for (int n = 0; n < NQ; ++n) {
    const float2 l2 = *reinterpret_cast<const float2*>(lse2 + 8 * n + 2 * t);
#pragma unroll
    for (int e = 0; e < 4; ++e) st[n][e] = ptx::ex2(fmaf(st[n][e], scale_log2, -((e & 1) ? l2.y : l2.x)));
  }
}
// p: Pᵀ of 16 queries as an fp16 A fragment (ldmatrix of the stored Pᵀ), which holds the elements
// of the two C fragments dpt0 (queries 2t, 2t + 1) and dpt1 (8 + 2t, 8 + 2t + 1) in their order:
// register 2h + r has key g + 8r of column tile h. delta: D of those 16 queries.
__device__ __forceinline__ void score_gradient(const std::uint32_t (&p)[4], float (&dpt0)[4], float (&dpt1)[4],
                                               const float* delta) {
  const int t = static_cast<int>(threadIdx.x) % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float(&dpt)[4] = h == 0 ? dpt0 : dpt1;
    const float2 dd = *reinterpret_cast<const float2*>(delta + 8 * h + 2 * t);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float2 pr = __half22float2(*reinterpret_cast<const __half2*>(&p[2 * h + r]));
      dpt[2 * r] = pr.x * (dpt[2 * r] - dd.x);
      dpt[2 * r + 1] = pr.y * (dpt[2 * r + 1] - dd.y);
    }
  }
}

}  // namespace fa::step08
