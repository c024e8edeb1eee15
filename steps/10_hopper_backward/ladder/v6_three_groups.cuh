// v6_three_groups.cuh — rung 6 of stage 10's ladder: at D = 64, three
// warpgroups of 64 keys in a block (Bc = 192, 384 threads) instead of two.
//
// What changed from rung 5 (ladder/v5_ds_by_stmatrix.cuh), one idea, at D = 64 only: the block
// takes a third warpgroup and 64 more keys. The kernel is rung 5's unchanged (every loop of it
// counts warpgroups from the configuration): each warpgroup computes dQ over its own keys into a
// part of its own, as both did at D = 64, and the TMA adds three parts instead of two. At D = 128
// the rung is rung 5: there a thread needs 224 registers, and 384 threads leave 170.
//
// Why: rung 3's profile has the tensor pipe active 30.5 % of the time at D = 64 (44.9 % at
// D = 128), and rung 4 showed that freeing the two warpgroups from each other's barriers gains 1 %:
// what is short is work to overlap, not independence. Rung 5's stores by stmatrix brought a
// thread's registers at D = 64 from 193 to 159, which 384 threads can hold (65536 / 384 = 170):
// four more warps per SM to issue while the others wait, and each Q/dO tile brought from L2 serves
// 192 keys instead of 128. The cost: shared memory 201 KiB (K and V 48, Q and dO 32, dS 24, dQ's
// parts 96), and at N = 4k a head's last key tile is a third full (4096 = 21 × 192 + 64).
//
// No prediction was written before its first run. Measured (one H200, the paper shapes, one run;
// docs/results/step10_rungs4-6_h200/): 1.04-1.09× rung 5 without the mask (4k, 16k), 1.04 with it.
#pragma once

#include "10_hopper_backward/ladder/v5_ds_by_stmatrix.cuh"

namespace fa::step10 {

// Rung 6's tile shape: three warpgroups at D = 64, rung 5's two at D = 128.
template <int D>
using ThreeGroupsConfig = DqByTmaConfig<D, D == 64 ? 3 : 2>;

}  // namespace fa::step10
