// backward_tile.cuh — stage 06: the two lines of calculus that the backward kernels are built on.
//
// Kept apart from the kernels (flash_backward.cu) because they are exercise ex06: the learner's
// copy of this file (exercises/06_cuda_backward/backward_tile.cuh) has the two marked regions
// emptied, and the exercise builds the real stage kernels against it. The functions are
// __host__ __device__ so that the exercise's first checks run them on the host, where a TODO can
// throw and name itself (device code cannot throw).
//
// Notation (docs/glossary.md): P = exp(S − LSE) is the softmax of one query row i, dP = dO Vᵀ,
// delta_i = D_i = rowsum(dO ∘ O) (called `delta` in code because D is the head dimension).
//
// What you should see when it passes (on a GPU): three `ok` lines, then `3 of 3 checks pass.`
// Without a GPU only the host checks run; the kernel checks report skipped (exit 77).
// Hints, one at a time:
//   1. Both holes are a line or two: ex06:ds one element, ex06:dkdv two nested loops.
//   2. dS_ij = P_ij (dP_ij − D_i) with D_i = rowsum(dO ∘ O); dV += Pᵀ dO; dK += dSᵀ Q.
//   3. return p * (dp - delta); and for m < TM, n < TN: dv[m][n] += p[m] * d_o[n];
//      dk[m][n] += ds[m] * q[n];
// Common mistakes: D_i from dO ∘ O of the row, not of the column; applying the softmax scale
// here as well as in the kernel (the kernel folds τ into dS); swapping the roles of p and ds.
#pragma once

#include <cmath>

#include "fa/exercise.hpp"

namespace fa::step06 {

// What a starter's hole gives the device, where FA_TODO cannot throw: NaN, so that a kernel built
// on an unfinished helper fails its comparison (on the host the hole throws fa::TodoNotDone).
inline constexpr float kTodoNaN = __builtin_nanf("");

// dS_ij = P_ij (dP_ij − D_i): the softmax's Jacobian applied to dP for one element. It needs only
// the row's D_i, never the whole row of P: that is what makes a tiled backward possible.
// >>> ex06:ds
__host__ __device__ inline float grad_score(float p, float dp, float delta) {
#ifndef __CUDA_ARCH__
  FA_TODO("ex06:ds", "return dS_ij = P_ij (dP_ij - delta_i) for one element");
#endif
  return kTodoNaN;
}
// <<< ex06:ds

// One step r of the key-tile accumulators, the outer products of a column of the tile:
//   dV_j += P_rjᵀ dO_r        (dV = Pᵀ dO)
//   dK_j += dS_rjᵀ Q_r         (dK = dSᵀ Q · scale; the scale is folded into dS by the caller)
// p[m], ds[m]: the tile's entries of query row r for the thread's TM keys; d_o[n], q[n]: row r of
// dO and Q at the thread's TN head-dimension columns.
// >>> ex06:dkdv
template <int TM, int TN>
__host__ __device__ inline void accumulate_dk_dv(float (&dk)[TM][TN], float (&dv)[TM][TN], const float (&p)[TM],
                                                 const float (&ds)[TM], const float (&q)[TN],
                                                 const float (&d_o)[TN]) {
#ifndef __CUDA_ARCH__
  FA_TODO("ex06:dkdv", "for every m < TM, n < TN: dv[m][n] += p[m] * d_o[n] and dk[m][n] += ds[m] * q[n]");
#endif
  dk[0][0] = dv[0][0] = kTodoNaN;
}
// <<< ex06:dkdv

}  // namespace fa::step06
