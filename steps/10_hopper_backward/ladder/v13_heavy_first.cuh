// v13_heavy_first.cuh — rung 13 of stage 10's ladder: with the causal mask, the blocks with the
// most work start first.
//
// What changed from rung 12 (ladder/v12_tiles_of_80.cuh), one idea: which key tile and K/V head a
// block owns, with the mask. Rung 12 hands them out in index order, each head's key tiles 0, 1,
// 2, ... in turn; key tile j sees the queries from its diagonal on, so its work falls with j, and
// the last head's key tile 0, the longest block of all, starts when most of the grid is done. Now,
// in groups of four K/V heads, key tile 0 of each head starts first, then key tile 1 of each, and
// so on (block_order.hpp): the long blocks start early and the short ones fill the end. Without
// the mask nothing changes; the kernel is rung 12's with its switch `heavy_first` on.
//
// Why: in a model of the launch (tests/test_block_order.cpp: 132 SMs, each block started on the
// first SM free, a block's time its query tiles plus two) index order ends 6.5 % after the ideal
// at D = 128, N = 4k (64 heads of 32 key tiles: a block of key tile 0 is an eighth of an SM's
// share) and 5.5 % at 8k, 3.3 % and 2.8 % at D = 64; heavy first, under 1 %. At 16k (16 heads of
// 128 key tiles) both orders are within 0.3 %. Four heads a group, not all of them: the blocks
// resident together keep sharing Q and dO through L2 (four heads at N = 4k, D = 128 are 24 MiB).
//
// Prediction, written before the first run: with the mask, 1.03-1.06× rung 12 at N = 4k, D = 128,
// 1.01-1.03× at D = 64, nothing at 16k; without it, 1.00×.
//
// Measured (one H100, bf16, the paper shapes at N = 4k, 8k and 16k, one run beside rung 12, SDPA
// flash and cuDNN: docs/results/compare_10_rung13_h100.json): with the mask at D = 128 1.03× rung 12
// at 4k and 1.05× at 8k, as modelled, and 0.97× at 16k; at D = 64 0.99-1.00×. Without the mask the
// two are one kernel and measured 0.98-1.04× apart, the run's spread: only 8k's gain is outside it.
// Two more rounds, alternating, with the mask (docs/results/step10_rung13_h100/ab_causal_613065f.txt):
// at D = 128 1.04-1.05× at 4k, 0.95-0.98× at 16k, 8k split; at D = 64 0.98-0.99× at 16k. At 16k
// the model has no tail to remove; the resident blocks belong to four heads instead of one.
// 244 registers at D = 128, 230 at D = 64, as rung 12. Beside cuDNN: 0.98-1.04× at D = 128,
// 1.06-1.10× at D = 64.
//
// Beside the rung, the deterministic variant: rung 12's switches with `ordered` on
// (ladder/v3_dq_by_tma.cuh, dq_turns.hpp), whose turns need the blocks in index order, so it
// cannot start the heaviest first. Predicted 0.90-0.98× the rung (0.85-0.95× with the mask);
// measured 0.66-0.85× on one H100 (alternating runs): without the mask each key tile waits for
// the one before it to hand on its turn, half a step late, so the last of a head runs far behind.
#pragma once

#include "10_hopper_backward/ladder/v12_tiles_of_80.cuh"

namespace fa::step10 {

// Rung 13's kernel: rung 12's, heavy first with the mask; the same tile shape (TilesOf80Config).
template <class Base>
struct HeavyFirstOptions : Base {
  static constexpr bool heavy_first = true;
};
template <class T, class C>
inline constexpr auto backward_heavy_first_kernel =
    backward_dq_tma_kernel<T, C, HeavyFirstOptions<TilesOf80OptionsFor<C>>>;

// The deterministic variant: rung 13's kernel with dQ's additions in a fixed order (the switch
// `ordered`, dq_turns.hpp), its blocks in the order its turns need (each head's key tiles in turn,
// with the mask from the last) instead of heavy first.
template <class Base>
struct OrderedOptions : Base {
  static constexpr bool ordered = true;
};
template <class T, class C>
inline constexpr auto backward_deterministic_kernel =
    backward_dq_tma_kernel<T, C, OrderedOptions<TilesOf80OptionsFor<C>>>;

}  // namespace fa::step10
