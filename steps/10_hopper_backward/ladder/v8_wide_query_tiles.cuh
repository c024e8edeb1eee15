// v8_wide_query_tiles.cuh — rung 8 of stage 10's ladder: at D = 64, query tiles of 128 rows and two
// warpgroups (a tile of 128 keys × 128 queries per step) instead of rung 6's 64 rows and three.
//
// What changed from rung 6 (ladder/v6_three_groups.cuh), one idea, at D = 64 only: the query tile
// that streams past the block doubles, Br = 64 → 128, and the block goes back to two warpgroups of
// 64 keys (Bc = 128, 256 threads). Each warpgroup's Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ become 64 keys × 128
// queries (wgmma N = 128 instead of 64), dV += Pᵀ·dO and dK += dSᵀ·Q take 8 k-steps of 16 queries
// instead of 4, and dQ = dS·K (128 queries × 64 columns) is split by rows: warpgroup w computes
// queries 64w .. 64w + 63 over all 128 keys, both into one dQ part, so the TMA adds one part per
// step instead of three. The kernel is rung 5's (the configuration's Br and its dQ blocks of 64 rows
// × 64 columns: ladder/v3_dq_by_tma.cuh); at D = 128 the rung is rung 6 (a thread holds dK and dV,
// 128 floats, and 64 × 128 of Sᵀ and dPᵀ would be 128 more).
//
// Why: a wgmma that reads both operands from shared memory (Sᵀ, dPᵀ, dQ) at N = 64 needs 4 KiB per
// 131,072 FLOPs: on an H100 (about 4,096 dense FLOPs and 128 shared-memory bytes a clock per SM)
// 32 clocks of reading for 32 of multiplying, so those products run at the shared memory's pace,
// with the TMA's writes, dS's and dQ's stores and the reduce-add's reads on the same port. Counted
// per step of rung 6 and of this rung: the shared-memory bytes per FLOP of the whole step fall by
// about a fifth (42 → 34 KiB per MFLOP: N = 128 for Sᵀ and dPᵀ, one dQ part instead of three), the
// dQ bytes added in L2 per FLOP halve (one part per 128 keys instead of three per 192), the Q/dO
// bytes per FLOP rise by half (a tile serves 128 keys, not 192), and the block barriers per FLOP
// halve. The cost: eight warps per SM instead of twelve to hide each other's waits, 256 threads
// that may take up to 255 registers each (Sᵀ and dPᵀ alone are 128 floats a thread), and shared
// memory 194 KiB (K, V 32; Q, dO 64; dS 32; dQ's two buffers 64). The per-row arrays (D, LSE·log2e)
// are padded to whole tiles of 128 rows from this rung on (bwd::kRowPadding; 640 from rung 12 on).
//
// Prediction, written before the first run: at D = 64 1.05-1.15× rung 6 without the mask, 1.03-1.12×
// with it (the diagonal's partly masked tiles are twice as wide); at D = 128 1.00× (the same kernel).
//
// Measured (one H200, bf16, the paper shapes at N = 4k and 16k, causal and not, one run beside rungs 6 and
// 8 to 11: docs/results/compare_10_rung10_h200.json): D = 64 1.28-1.37× rung 6, far above the prediction, causal
// like non-causal; D = 128 1.00× (0.996-1.003). The reading (not measured apart): besides the
// shared-memory bytes, the step's fixed work (two block barriers, the mbarrier wait, the
// reduce-add's issue, the loop's bookkeeping) now serves twice the queries.
#pragma once

#include <type_traits>

#include "10_hopper_backward/ladder/v6_three_groups.cuh"

namespace fa::step10 {

// Rung 8's tile shape: two warpgroups and query tiles of 128 at D = 64, rung 6's at D = 128.
template <int D>
using WideQueryTilesConfig = std::conditional_t<D == 64, DqByTmaConfig<64, 2, 128>, ThreeGroupsConfig<D>>;

}  // namespace fa::step10
