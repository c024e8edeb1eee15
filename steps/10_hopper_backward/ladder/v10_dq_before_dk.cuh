// v10_dq_before_dk.cuh — rung 10 of stage 10's ladder: dQ's products issued before dK's, so that
// dQ's stores into shared memory run while the tensor cores compute dK.
//
// What changed from rung 9 (ladder/v9_fast_exp.cuh), one idea: the order of a warpgroup's products
// after dS. Rung 9 issues dV += Pᵀ·dO and dK += dSᵀ·Q, waits at the barrier for every warpgroup's
// dS, waits for dV and dK, then issues dQ = dS·K, waits for it and stores it into dQ's buffer: the
// warpgroup's tensor-core queue is empty from dQ's last product until the next step's Sᵀ, while its
// stores (one block of 64 × 64 floats per warpgroup at either head dim: 16 float2 stores a thread),
// the fence and the step's barrier run. Now dV goes before the barrier as before, dQ's products
// right after it, then dK's behind them, and the warpgroup waits only for dV and dQ
// (wgmma.wait_group 1: the last group, dK, may still run) before storing dQ; it waits for dK
// after the stores. dSᵀ's registers stay live until
// then (dK reads them), dQ's accumulator is live beside them: 32 floats where the products of Sᵀ
// and dPᵀ (64 floats at D = 128, 128 at D = 64) were. Each warpgroup has one dQ block in both tile
// shapes (D = 128: 64 columns over all 128 keys; D = 64: 64 query rows over all 128 keys). The
// kernel is rung 5's with its switches `fast_exp` and `dq_before_dk` on, in rung 8's tile shape.
//
// Why: with two warpgroups and both barriers of a step, the tensor cores idle when both
// warpgroups are between products at once; the dQ stores were such a stretch in every step (the
// profiles of rungs 6 and 8: the tensor pipe busy about half the time). dK's products are as long
// as dQ's (64 × D × Br and 64 × 64 × Bc multiply-adds a warpgroup: the same at both head dims),
// longer than the stores.
//
// Prediction, written before the first run: 1.02-1.06× rung 9 at D = 128 and at D = 64, causal
// like non-causal.
//
// Measured (one H200, bf16, the paper shapes at N = 4k and 16k, causal and not, one run beside rungs 6 and
// 8 to 11: docs/results/compare_10_rung10_h200.json): 0.987-1.018× rung 9, below the prediction and inside the
// run's spread; faster at seven of the eight shapes, slower at D = 64, causal, 16k. Built on (the
// stage's kernel until rung 12): it costs one register a thread at D = 128 (225) and none at D = 64
// (230), and no shape measured it slower beyond the spread.
#pragma once

#include "10_hopper_backward/ladder/v9_fast_exp.cuh"

namespace fa::step10 {

// Rung 10's kernel: rung 9's with dQ's products before dK's.
struct DqBeforeDkOptions : FastExpOptions {
  static constexpr bool dq_before_dk = true;
};
template <class T, class C>
inline constexpr auto backward_dq_before_dk_kernel = backward_dq_tma_kernel<T, C, DqBeforeDkOptions>;

}  // namespace fa::step10
