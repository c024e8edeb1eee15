// backward_tile.cuh — stage 06's hole: the two lines of calculus that the backward kernels are
// built on.
//
// Kept apart from the kernels (flash_backward.cu includes it as <backward_tile.cuh>) because it is
// exercise ex06: the learner's copy (exercises/06_cuda_backward/backward_tile.cuh) has the two
// marked regions emptied, and the exercise builds these very kernels against it. The functions
// are __host__ __device__ so that the exercise's first checks run them on the host, where a TODO
// can throw and name itself (device code cannot throw).
//
// Notation (docs/glossary.md): P = exp(S − LSE) is the softmax of one query row i, dP = dO Vᵀ,
// delta_i = D_i = rowsum(dO ∘ O) (called `delta` in code because D is the head dimension).
#pragma once

#include <cmath>

namespace fa::step06 {

// dS_ij = P_ij (dP_ij − D_i): the softmax's Jacobian applied to dP for one element. It needs only
// the row's D_i, never the whole row of P: that is what makes a tiled backward possible.
// >>> ex06:ds
__host__ __device__ inline float grad_score(float p, float dp, float delta) { return p * (dp - delta); }
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
  for (int m = 0; m < TM; ++m)  // constant trip counts: nvcc unrolls both loops fully
    for (int n = 0; n < TN; ++n) {
      dv[m][n] = fmaf(p[m], d_o[n], dv[m][n]);
      dk[m][n] = fmaf(ds[m], q[n], dk[m][n]);
    }
}
// <<< ex06:dkdv

}  // namespace fa::step06
