// fragment_gradient.cuh — the softmax's gradient on the tensor cores' accumulator registers, in
// the transposed layout of stage 08's key-tile kernel: Pᵀ and dSᵀ = Pᵀ ∘ (dPᵀ − D) for one 16-key
// row block of a warp.
//
// After Sᵀ = K Qᵀ and dPᵀ = V dOᵀ (16 keys × 8·NQ queries), a thread holds for each 8-query column
// tile n (the mma.sync C fragment, fa/cuda/ptx/mma.cuh; g = lane / 4, t = lane % 4):
//
//              queries  8n+2t       8n+2t+1
//   key g               st[n][0]    st[n][1]         (and dpt[n][0..3] likewise)
//   key g + 8           st[n][2]    st[n][3]
//
// Stage 07 (fragment_softmax.cuh) had queries in the rows; here they are the columns, so the
// per-query numbers the forward left behind — LSE (as LSE·log2e) and D = rowsum(dO ∘ O) — belong to
// a thread's columns: the two queries 8n + 2t and 8n + 2t + 1, the same for both of its keys. A
// thread reads them as one float2 each (8-byte aligned: 2t is even), from the query tile's arrays in
// shared memory. No shuffle is needed: the softmax's normalization was done by the forward, and P
// is recomputed from the saved LSE in one FFMA and one MUFU.EX2 per score:
//   P  = 2^(s·τlog2e − LSE·log2e)          (s raw, −inf where masked: P = 0; LSE·log2e = +inf for
//                                            a query that sees no key and for padding: P = 0)
//   dS = P ∘ (dP − D)
// both in place, so that Pᵀ and dSᵀ stay in the registers that become the A operands of dV and dK.
//
// The hole of exercise ex08 (exercises/08_tensor_core_backward/fragment_gradient.cuh: this file with
// the two regions of probabilities_and_score_gradient as TODOs); the stage includes it as
// <fragment_gradient.cuh>, from holes/.
#pragma once

#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "fa/cuda/ptx/mma.cuh"

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
    const float2 l2 = *reinterpret_cast<const float2*>(lse2 + 8 * n + 2 * t);
    const float2 dd = *reinterpret_cast<const float2*>(delta + 8 * n + 2 * t);
    // <<< ex08:query_numbers
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      // >>> ex08:p_and_ds
      const float p = ptx::ex2(fmaf(st[n][e], scale_log2, -((e & 1) ? l2.y : l2.x)));
      st[n][e] = p;
      dpt[n][e] = p * (dpt[n][e] - ((e & 1) ? dd.y : dd.x));
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
