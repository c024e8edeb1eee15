// v14_split_tail.cuh — rung 14 of stage 10's ladder: without the mask, the last wave's key tiles
// split into pieces, so that the SMs do not idle through the last wave.
//
// What changed from rung 13 (ladder/v13_heavy_first.cuh), one idea: where every block does the
// same work (no mask), the key tiles of the last wave, and where the plan says so some before them,
// are each walked by several blocks, every piece a share of the tile's steps (tail_split.hpp). A
// piece adds its dK and dV into float32 sums with atomics instead of writing them; one more small
// kernel scales and converts those tiles' sums after the key-tile kernel. With the mask nothing
// changes (rung 13's longest-first order already fills the end with short blocks).
//
// Why: one block fits an SM, and the paper's shapes launch 4096 blocks at D = 64 and 2048 at
// D = 128 on the H100's 132 SMs: 31 waves and a last one of 4 blocks, or 15 and a last of 68. The
// last wave takes a whole block's time, so 3.0 % of the SMs' time is idle at both head dims and
// every length (the block count is B·Nk/128 · H = 16k/128 · 2048/D at every N). A model of the
// launch (tail_split.hpp, a piece costing one step more than its share for its loads and atomics)
// splits the 4 tiles at D = 64 into 32 pieces of one step (1,056 → 1,025 step-times at 4k) and the
// 68 at D = 128 into 9 at 4k (848 → 830), 13 at 8k and 16k.
//
// Prediction, written before the first run: without the mask 1.02-1.03× rung 13 at D = 64 and
// 1.01-1.025× at D = 128 (the model's 2.1-2.9 %, less what the pieces' atomics and second loads of
// K and V cost beyond its one step); with the mask 1.00×. dK and dV of the split tiles are summed
// in whatever order the pieces finish, so their last bits may differ between runs (dQ's already do).
//
// Measured (one H100, bf16, the paper shapes at N = 4k and 16k, two alternating rounds against
// rung 13 from one build, docs/results/step10_rung14_h100/): without the mask 1.022 and 1.026× at
// D = 64, 1.006× (4k) and 1.025× (16k) at D = 128, the means of the rounds: inside the prediction
// at D = 64 and at 16k, below it at D = 128, 4k. With the mask the same work (0.99-1.01×). The
// stage's kernel since its default path (the ring's tests included) ran with it: four more rounds
// at 4k, 8k and 16k (docs/results/step10_stage14_h100/), 1.01-1.03× rung 13 without the mask as
// the mean of the rounds at each shape, 0.97-1.00× with it (at D = 128, 16k the board's power cap
// sets the clock, both rungs alike: docs/results/step10_power_h100/).
#pragma once

#include "10_hopper_backward/ladder/v13_heavy_first.cuh"

namespace fa::step10 {

template <class Base>
struct SplitTailOptions : Base {
  static constexpr bool split_tail = true;
};
template <class T, class C>
inline constexpr auto backward_split_tail_kernel =
    backward_dq_tma_kernel<T, C, SplitTailOptions<HeavyFirstOptions<TilesOf80OptionsFor<C>>>>;

// After the key-tile kernel: the split tiles' dK = τ·(sum) and dV = sum in the inputs' type, one
// element a thread (a few tiles: the last wave's).
template <class T, int Bc, int D>
__global__ void finish_split_tiles_kernel(const TailSplit split, T* dk, T* dv, int key_tiles, int seq_k, float scale) {
  const long long n = split.split_tiles * Bc * D;
  for (long long e = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long row = e / D, tile = split.whole_blocks + row / Bc;  // index order: tile = head·key_tiles + j
    const int key = static_cast<int>(tile % key_tiles) * Bc + static_cast<int>(row % Bc);
    if (key >= seq_k) continue;
    const long long at = ((tile / key_tiles) * seq_k + key) * D + e % D;
    dk[at] = static_cast<T>(scale * split.dk[e]);
    dv[at] = static_cast<T>(split.dv[e]);
  }
}

}  // namespace fa::step10
