// v12_tiles_of_80.cuh — rung 12 of stage 10's ladder: at D = 128, query tiles of 80 rows instead of
// 64, with dQ computed as its transpose.
//
// What changed from rung 10 (ladder/v10_dq_before_dk.cuh), one idea, at D = 128 only: the query tile
// that streams past the block grows from 64 to 80 rows (a step is 128 keys × 80 queries). Sᵀ = K·Qᵀ
// and dPᵀ = V·dOᵀ become 64 keys × 80 queries a warpgroup (wgmma N = 80), dV += Pᵀ·dO and
// dK += dSᵀ·Q take five k-steps of 16 queries instead of four. dQ = dS·K is 80 × 128, and 80 is not
// a multiple of wgmma's M = 64, so it is computed transposed: dQᵀ = Kᵀ·dSᵀ, each warpgroup 64
// columns of D (M) × 80 queries (N) over all 128 keys, A being K's tile read as its transpose
// (MN-major) and B dS as stored; the accumulator is stored into dQ's buffer one float at a time,
// back in [query][column] order, without a bank conflict (ladder/v3_dq_by_tma.cuh, `dq_transposed`).
// Two dQ buffers of 80 rows no longer fit beside the rest (246 KiB of the 227 a block may have), so
// there is one (206 KiB in all): thread 0 waits for the previous step's reduce-add to have read it
// just before the barrier after dS's stores, about a step after it was issued. The per-row arrays are
// padded to 640 rows per head (a multiple of 64, 80 and 128). At D = 64 the rung is rung 10.
//
// Why: rung 8 made the query tile twice as tall at D = 64 and gained 1.28-1.37×, far more than the
// shared-memory bytes it saved; the step's fixed work (two block barriers, the mbarrier wait, the
// reduce-add's issue, the loop's bookkeeping) then served twice the queries. At D = 128 a thread
// holds dK and dV (128 floats), and Sᵀ, dPᵀ of 64 × 128 would be 128 more: 80 rows is what the 255
// registers allow (Sᵀ and dPᵀ 40 floats each instead of 32, their 16-bit copies 20 registers each
// instead of 16). FlashAttention-3 makes the same choice at D = 128 without the mask (its launch
// code, hopper/flash_bwd_launch_template.h: 80 × 128 tiles, dQ with A and B swapped).
//
// Prediction, written before the first run: at D = 128, 1.05-1.10× rung 10 without the mask, less
// with it (0.98-1.05×: a tile on the diagonal is partly masked over 80 rows instead of 64); the cost
// at N = 4k, a last query tile of 16 rows (4096 = 51 × 80 + 16), is under 2 % of the work.
//
// Measured (one H100, bf16, the paper shapes at N = 4k and 16k, D = 128, causal and not, three runs
// beside rung 10, SDPA flash and cuDNN: docs/results/compare_10_rung12_h100.json and
// docs/results/step10_rung12_h100/): 1.11-1.14× rung 10 without the mask, above the prediction, and
// 1.10-1.20× with it, far above (the diagonal's partly masked tiles cost less than a step's fixed
// work saved); 244 registers, no spills. Nsight Compute at N = 4k, no mask: 710 M instructions
// for the work that took rung 10 871 M (its profile, on an H200): 833 per warp and step of 80
// queries against 831 per step of 64. The stage's kernel: beside cuDNN 1.01-1.06× without the
// mask and 0.99-1.14× with it over four runs, where rung 10 was 0.89-0.95×.
#pragma once

#include <type_traits>

#include "10_hopper_backward/ladder/v10_dq_before_dk.cuh"

namespace fa::step10 {

struct TilesOf80Options : DqBeforeDkOptions {
  static constexpr bool dq_transposed = true;
};

// Rung 12's tile shape: 128 keys × 80 queries and one dQ buffer at D = 128, rung 10's at D = 64;
// and its kernel: rung 10's with dQ transposed at D = 128, rung 10's at D = 64.
template <int D>
using TilesOf80Config = std::conditional_t<D == 128, DqByTmaConfig<128, 2, 80, 1>, WideQueryTilesConfig<D>>;
// Rung 12's switches for a tile shape C of TilesOf80Config (the rungs above build on them).
template <class C>
using TilesOf80OptionsFor = std::conditional_t<C::kBr == 80, TilesOf80Options, DqBeforeDkOptions>;
template <class T, class C>
inline constexpr auto backward_tiles_of_80_kernel = backward_dq_tma_kernel<T, C, TilesOf80OptionsFor<C>>;

}  // namespace fa::step10
