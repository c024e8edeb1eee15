// v11_dv_early.cuh — rung 11 of stage 10's ladder: dV += Pᵀ·dO issued as soon as P is ready, so
// that the tensor cores compute it while the warps compute dS and store it.
//
// What changed from rung 10 (ladder/v10_dq_before_dk.cuh), one idea: when a warpgroup's dV
// products are issued. Rung 10 computes P, waits for dPᵀ, computes dS = P∘(dP − D), packs it,
// stores it into shared memory, and only then issues dV's products (dK's follow dQ's, after the
// barrier): from the end of dPᵀ to the first product of dV the warpgroup's tensor-core queue is
// empty, about 4 instructions an element of dS (subtract, multiply, pack, and the stmatrix
// shared among eight), 64 elements a thread at D = 64 and 32 at D = 128. Now P is packed into
// dV's A operand right after the exponentials, dV's products are issued in a group of their
// own, and the warpgroup waits only for dPᵀ (wgmma.wait_group 1: dV may still run) before dS. dV
// reads only P's registers, which nothing writes until the next step, so dS's work and dV's
// products overlap. The kernel is rung 5's with its switches `fast_exp`, `dq_before_dk` and
// `dv_early` on, in rung 8's tile shape.
//
// Why: in rungs 6 and 8 (Nsight Compute, N = 4k) the tensor pipe is busy about half the time and
// the schedulers find an eligible warp in fewer than half of their cycles: with two warpgroups a
// block, the stretches where both are between products leave the tensor cores idle. dV's
// products (64 × D × Br multiply-adds a warpgroup) are as long as dK's; the dS work they now hide
// is on every step's chain.
//
// Prediction, written before the first run: 1.02-1.05× rung 10 at both head dims, causal like
// non-causal.
//
// Measured (one H200, bf16, the paper shapes at N = 4k and 16k, causal and not, one run beside rungs 6 and
// 8 to 11: docs/results/compare_10_rung10_h200.json): 0.968-1.005× rung 10, a loss at D = 128 (0.97-0.99×) and
// nothing at D = 64. Registers rose to 234 at D = 128 and 250 at D = 64 (P's packed registers live
// beside dPᵀ's accumulator). The reading, not measured apart: the other warpgroup's products
// already filled that stretch, and dV issued early sits in the queue ahead of the other
// warpgroup's next products, delaying the chain it waits on.
// Kept as a rung, not built on.
#pragma once

#include "10_hopper_backward/ladder/v10_dq_before_dk.cuh"

namespace fa::step10 {

// Rung 11's kernel: rung 10's with dV's products issued before dS is computed.
struct DvEarlyOptions : DqBeforeDkOptions {
  static constexpr bool dv_early = true;
};
template <class T, class C>
inline constexpr auto backward_dv_early_kernel = backward_dq_tma_kernel<T, C, DvEarlyOptions>;

}  // namespace fa::step10
