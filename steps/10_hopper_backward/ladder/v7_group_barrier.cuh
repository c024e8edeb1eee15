// v7_group_barrier.cuh — rung 7 of stage 10's ladder: at D = 64 the barrier in the middle of a step
// (after dS's stores) is each warpgroup's own, so the three warpgroups drift apart within a step.
//
// What changed from rung 6 (ladder/v6_three_groups.cuh), one idea: where a warpgroup's dQ = dS·K
// reads only its own 64 keys of dS (D = 64: each warpgroup adds a dQ part of its own), the block
// barrier after dS's stores becomes a named barrier of the warpgroup's 128 threads (bar.sync 1 + w,
// 128). That barrier also passed on thread 0's wait for the reduce-add that last read dQ's buffer;
// the wait moves to just before the step's last barrier (the block's, kept: it frees the Q/dO stage
// for the next load), where the reduce-add it waits for was issued a whole step before and is the
// only one pending. At D = 128 each warpgroup's dQ columns read both warpgroups' keys of dS, so the
// middle barrier stays the block's there and only the wait moves. The kernel is rung 5's with its
// switch `group_barrier` on, in rung 6's tile shape.
//
// Why: in rung 3's profile (docs/notes/10_hopper_backward.md) 16 % of the warps' stall samples at
// D = 64 (19 % at D = 128) wait at that middle barrier, and the notebook's reading is that the
// warpgroups run in lockstep: none's exponentials and dS stores overlap another's products. At
// D = 64 the barrier is there only for thread 0's wait, which has a step to spare elsewhere.
//
// Prediction, written before the first run: at D = 64 1.03-1.08× rung 6 (a warpgroup that reaches
// the middle of the step first starts its dQ products while the others still compute their
// exponentials; the step's last barrier still aligns them once a step), causal like non-causal;
// at D = 128 0.99-1.01× (the same kernel but for where thread 0 waits).
//
// Measured (one H100, bf16, the paper shapes at N = 4k and 16k, causal and not, one run beside rung 6:
// docs/results/compare_10_rung7_h100.json): D = 64 1.01-1.02× rung 6, below the prediction and
// inside the spread between two processes of one run; D = 128 0.99-1.02×. Not kept as the stage's
// kernel: the warpgroups wait for the work before the barrier, not for the barrier (as in rung 4).
#pragma once

#include "10_hopper_backward/ladder/v6_three_groups.cuh"

namespace fa::step10 {

// Rung 7's kernel: rung 5's with the warpgroup's own barrier after dS's stores where dQ allows it.
struct GroupBarrierOptions : StmatrixOptions {
  static constexpr bool group_barrier = true;
};
template <class T, class C>
inline constexpr auto backward_group_barrier_kernel = backward_dq_tma_kernel<T, C, GroupBarrierOptions>;

}  // namespace fa::step10
