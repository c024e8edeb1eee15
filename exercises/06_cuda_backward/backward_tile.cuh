// Exercise 06 — the starter of stage 06's hole backward_tile.cuh: the two lines of calculus that
// the backward kernels are built on.
//
// The stage's kernels (steps/06_cuda_backward/flash_backward.cu) include this file as
// <backward_tile.cuh>; the exercise builds them with this folder first on the include path, so
// they run your two functions. Fill in the two holes, in order, between `// >>> ex06:TAG` and
// `// <<< ex06:TAG` (leave the markers: the course check and ./course check read them):
//   ex06:ds    grad_score(p, dp, delta): dS_ij = P_ij (dP_ij − D_i) for one element
//   ex06:dkdv  accumulate_dk_dv: for every m < TM and n < TN,
//                dv[m][n] += p[m] · d_o[n]      (dV = Pᵀ dO, one column r of the tile at a time)
//                dk[m][n] += ds[m] · q[n]       (dK = dSᵀ Q; the kernel folds the scale into dS)
// The functions are __host__ __device__: the first checks run them on the host, where a hole
// throws and names itself; on the device a hole gives NaN, and the kernel checks fail.
//
// Notation (docs/glossary.md): P = exp(S − LSE) is the softmax of one query row i, dP = dO Vᵀ,
// delta_i = D_i = rowsum(dO ∘ O) (called `delta` in code because D is the head dimension).
// Check your work: ./course check ex06 (or cmake --build build --target check_ex06). The chapter
// is docs/06_cuda_backward.md; the answer is solutions/06_cuda_backward/backward_tile.cuh.
//
// What you should see when it passes (on a GPU): three `ok` lines, then `3 of 3 checks pass.`
// Without a GPU the checks report skipped (exit 77), the host checks included: that is not a pass.
// Stuck? `./course hint ex06` shows a hint, one at a time (3 in all, each nearer the code).
// Common mistakes: D_i from dO ∘ O of the row, not of the column; applying the softmax scale
// here as well as in the kernel (the kernel folds τ into dS); swapping the roles of p and ds.
#pragma once

#include <cmath>

#include "fa/exercise.hpp"

namespace fa::step06 {

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
