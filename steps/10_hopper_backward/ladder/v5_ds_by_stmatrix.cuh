// v5_ds_by_stmatrix.cuh — rung 5 of stage 10's ladder: dS into shared memory by stmatrix, four
// 8 × 8 tiles per instruction, instead of one 16-bit store per element.
//
// What changed from rung 3 (ladder/v3_dq_by_tma.cuh; rung 4 measured slower at D = 128 and is not
// built on), one idea: a thread's 32 elements of dSᵀ per query tile went to shared memory as 32
// 16-bit stores (holes/ds_transpose.cuh, store_ds_transposed); now a warp writes them with four
// stmatrix.x4.trans (store_ds_transposed_x4 beside it). The registers are already the fragments
// stmatrix takes (the accumulator layout of 8 × 8 tiles, two 16-bit values to a register), and
// .trans writes each tile transposed, so that a row in memory is one query's 8 keys: a whole
// 16-byte chunk of the swizzled tile. The kernel is rung 3's with its switch `stmatrix` on.
//
// Why: rung 3's profile (Nsight Compute, D = 128, N = 4k) counts 58.7 M shared-store requests that
// take 131.8 M wavefronts, 2.2 per request: the 16-bit stores write 32 lanes × 2 bytes into 8
// rows of the tile, and the tool estimates 15 % to gain from the conflicts alone. They sit on the
// path from the exponentials to dV's and dK's products, which wait at the barrier after them. The
// stmatrix stores write 512 bytes per instruction in four conflict-free wavefronts: 8 times fewer
// instructions for dS, and about a quarter of the wavefronts.
//
// Prediction, written before the first run: 1.04-1.10× rung 3 at D = 128, 1.06-1.15× at D = 64
// (where the stores weigh more against the products), causal like non-causal.
// Measured (one H200, the paper shapes, one run; docs/results/step10_rungs4-6_h200/): 1.08-1.09× rung
// 3 at D = 128, 1.09-1.11× at D = 64: inside, causal like non-causal. Registers a thread: 224 at
// D = 128 (rung 3: 254), 159 at D = 64 (193), which rung 6 spends.
#pragma once

#include "10_hopper_backward/ladder/v3_dq_by_tma.cuh"

namespace fa::step10 {

// Rung 5's kernel: rung 3's, dS stored by stmatrix.
struct StmatrixOptions : DqTmaOptions {
  static constexpr bool stmatrix = true;
};
template <class T, class C>
inline constexpr auto backward_ds_by_stmatrix_kernel = backward_dq_tma_kernel<T, C, StmatrixOptions>;

}  // namespace fa::step10
