// v3_dq_by_tma.cuh — rung 3 of stage 10's ladder: dQ leaves the block through shared memory and
// the TMA's reduce-add instead of the warps' float atomics.
//
// What changed from rung 2 (ladder/v2_rows_in_shared.cuh), one idea: each warpgroup stores its
// dQ = dS·K of the query tile (64 columns of D at a time, as before) into a float32 buffer in
// shared memory laid out as the TMA's boxes (Br rows × 32 floats, the 128-byte swizzle); after the
// block barrier that ends the tile, one thread asks the TMA to add the buffer into the float32 dQ
// accumulator in global memory (cp.reduce.async.bulk.tensor ... .add, one per box), and does not
// wait: two buffers, the one of tile n reused at tile n + 2, when the thread has waited for that
// reduce-add to have read it (cp.async.bulk.wait_group.read 1). Where the two warpgroups split the
// keys (D = 64) each has a buffer of its own and both are added. Rows past Nq are not written by
// the TMA (the box is clipped), so the tail check goes too.
//
// Why: read with each line's scoreboard bits, a profile of rung 1 (docs/notes/10_hopper_backward.md)
// put about 23 % (D = 128) and 20 % (D = 64) of the warps' stall samples on the dQ atomics: the
// 16 REDG.E.ADD.F32x2 of a thread per column block wait for the queue to the memory system, and the
// first instruction after the tile's barrier waits for their address registers. Rung 2 left them.
// A store to shared memory takes the same registers and needs no queue to L2; the additions in L2
// remain (the same bytes, as whole 128-byte lines), but no warp waits for them.
//
// Grouped-query heads (Hkv < Hq) arrive with this rung, the stage's first kernel to take them: a
// block owns the keys of one K/V head and walks the query tiles of every query head that shares it,
// one after the other through the same two buffers, so dK and dV are summed over the group in
// registers, in float32, and written once (the rungs below refuse Hkv < Hq).
//
// Prediction, written before the first run: 1.10-1.20× rung 2 at both head dims, more at D = 64
// (two partial tiles and the atomics' larger share); causal like non-causal. The cost: 64 KiB more
// shared memory (two buffers of 32 KiB; 210 KiB at D = 128, of the 227 the SM gives a block), 16
// shared stores of 8 bytes a thread per tile, and one fence.
// Measured (one H200, the paper shapes, one run with rungs 1-2 and stage 08;
// docs/results/step10_rung3_h200/): 1.11-1.14× rung 2, inside the prediction, but not more at
// D = 64 (1.13-1.14) than at D = 128 (1.11-1.12); causal like non-causal. Its profile puts the
// largest share of the warps' stall samples, 19 % (D = 128) and 16 % (D = 64), at the block
// barrier after dS's stores (docs/notes/10_hopper_backward.md).
#pragma once

#include <cuda_runtime.h>

#include <cuda/atomic>

#include <cstdint>

#include <ds_transpose.cuh>  // holes/: the hole of exercise ex10
#include "10_hopper_backward/backward_maps.cuh"
#include "10_hopper_backward/block_order.hpp"
#include "10_hopper_backward/dq_turns.hpp"
#include "10_hopper_backward/tail_split.hpp"
#include "fa/cuda/backward/key_tiles.cuh"
#include "fa/cuda/hopper/tma.cuh"
#include "fa/cuda/hopper/wgmma.cuh"
#include "fa/cuda/ptx/barrier.cuh"
#include "fa/cuda/ptx/mma.cuh"
#include "fa/cuda/tc/tile_ops.cuh"

namespace fa::step10 {
using namespace hopper;  // TMA and wgmma wrappers (common/cuda/include/fa/cuda/hopper/)

// The tile shape: head dim D (64 or 128), kGroups warpgroups of 64 keys (Bc = 64·kGroups), query
// tiles of Br = 64 (from rung 8 on 128 at D = 64: ladder/v8_wide_query_tiles.cuh; from rung 12 on 80
// at D = 128: ladder/v12_tiles_of_80.cuh; a divisor of the per-row arrays' padding,
// bwd::kRowPadding), two Q/dO buffers and kDqStages buffers for dQ (two; one from rung 12 on at
// D = 128, where two do not fit).
template <int D_, int kGroups_, int kBr_ = 64, int kDqStages_ = 2>
struct DqByTmaConfig {
  static constexpr int D = D_, kGroups = kGroups_;
  static constexpr int kBc = 64 * kGroups, kBr = kBr_, kThreads = 128 * kGroups, kStages = 2, kDqStages = kDqStages_;
  using KVTile = tc::SwizzledTile<kBc, D>;  // K, V: [keys][D]
  using QTile = tc::SwizzledTile<kBr, D>;   // Q, dO: [queries][D]
  using DsTile = tc::SwizzledTile<kBr, kBc>;  // dS: [queries][keys], K-major for dQ = dS·K
  static constexpr int kKVBytes = KVTile::kElements * 2, kQBytes = QTile::kElements * 2,
                       kDsBytes = DsTile::kElements * 2;
  // dQ = dS·K is Br × D: blocks of 64 query rows × 64 columns, one wgmma accumulator each. Each
  // warpgroup takes whole blocks over all Bc keys when there are enough of them (D = 128: one column
  // block each; Br = 128: one row block each), else every block over its own 64 keys. (Computed
  // transposed, rung 12, dQᵀ = Kᵀ·dSᵀ is D × Br: one block of 64 columns of D × Br queries each.)
  static constexpr int kDqRowBlocks = kBr / 64, kDqColumnBlocks = D / 64;
  static constexpr bool kDqSplitsKeys = kDqRowBlocks * kDqColumnBlocks < kGroups;
  // Per stage, the query tile's LSE·log2e and D (Br floats each), brought with Q and dO.
  static constexpr int kRowsBytes = 2 * kBr * 4;
  // Per dQ stage, dQ's buffer: kDqParts tiles of Br rows × D floats (one per warpgroup when they split
  // the keys and both add to every element, else one that they divide by columns), each in boxes
  // of Br rows × 32 floats in the 128-byte swizzle: the layout the TMA reads for its reduce-add.
  static constexpr int kDqParts = kDqSplitsKeys ? kGroups : 1;
  static constexpr int kDqBoxFloats = kBr * hopper::kFloatBoxColumns;
  static constexpr int kDqBytes = kDqParts * (D / hopper::kFloatBoxColumns) * kDqBoxFloats * 4;
  // K, V, then kStages × (Q, dO), dS, kDqStages × dQ, kStages × (LSE·log2e, D), then the mbarriers
  // (K/V's and one per stage); +1024 to align.
  static constexpr int kSmemBytes = 2 * kKVBytes + 2 * kStages * kQBytes + kDsBytes + kDqStages * kDqBytes +
                                    kStages * kRowsBytes + 8 * (1 + kStages) + 1024;
  // Every tile starts 1024-byte aligned (the swizzle's period) if each size is a multiple of it.
  static_assert(bwd::kRowPadding % kBr == 0, "the per-row arrays are padded to whole query tiles");
  static_assert(kKVBytes % 1024 == 0 && kQBytes % 1024 == 0 && kDsBytes % 1024 == 0 && kDqBytes % 1024 == 0,
                "tiles: 1024-byte multiples");
};

// The switches of this kernel that the rungs above it turn on, one idea each: a rung's options are
// the rung below's with one switch more (a struct that derives from theirs and sets it; ladder/v5_ds_by_stmatrix.cuh
// and on). Rung 3 has every switch off:
//   ordered: the order of dQ's additions. Off, as they come (the float32 sums' last bits change
//     from run to run); on, in a fixed order (bitwise the same dQ on every run), counted in
//     dq_turns[query head][i] (zeroed by the host; query_tiles per head): a key tile adds its share
//     of query tile i when the count equals its turn, and counts one more once its additions are
//     done, which thread 0 waits for in the middle of the next step, not at once. The turns and
//     which key tile a block owns: dq_turns.hpp (without the mask by key tile; with it from each
//     query tile's last key tile down, the order of arrival, the last key tile's block started
//     first). The deterministic variant (ladder/v13_heavy_first.cuh) turns it on.
//   stmatrix: dS stored by stmatrix, four 8 × 8 tiles per instruction (rung 5), instead of one
//     16-bit store per element.
//   group_barrier: where each warpgroup's dQ reads only its own keys of dS, the barrier after dS's
//     stores is the warpgroup's own (rung 7), and thread 0 waits for dQ's buffer before the step's
//     last barrier.
//   fast_exp: P's exponentials by ex2.approx.ftz, one MUFU.EX2 each (rung 9), instead of exp2f's
//     four instructions.
//   dq_before_dk: dQ's products issued between dV's and dK's (rung 10), so that dQ's stores into
//     shared memory run while the tensor cores compute dK; each warpgroup has one dQ block.
//   dv_early: dV's products issued as soon as P is packed (rung 11), so that they run while dS is
//     computed and stored.
//   dq_transposed: dQ computed as its transpose, dQᵀ = Kᵀ·dSᵀ (rung 12): M = 64 columns of D per
//     warpgroup, N = Br queries, so that Br need not be a multiple of 64 (wgmma's M); stored into
//     dQ's buffer one float at a time, transposed back.
//   heavy_first: with the mask, the blocks that see the most queries start first, in groups of four
//     K/V heads (rung 13, block_order.hpp), instead of each head's key tiles in turn.
//   split_tail: the key tiles of the last wave (and with them, where the launch's plan says so, the
//     waves before it) walked by several blocks each, a share of the steps each (rung 14,
//     tail_split.hpp; the launch splits only without the mask); a piece adds its dK and dV into
//     float32 sums (`split`), which the launch converts after.
struct DqTmaOptions {
  static constexpr bool ordered = false, stmatrix = false, group_barrier = false, fast_exp = false,
                        dq_before_dk = false, dv_early = false, dq_transposed = false, heavy_first = false,
                        split_tail = false;
};

template <class T, class C, class Options = DqTmaOptions>
__global__ void __launch_bounds__(C::kThreads, 1)
    backward_dq_tma_kernel(const __grid_constant__ BackwardMapsWithDq maps, const bwd::BackwardArgs<T> a,
                           const int heads_per_kv, int* dq_turns, const int query_tiles,
                           const TailSplit split) {
  constexpr bool kOrdered = Options::ordered, kStmatrix = Options::stmatrix, kGroupBarrier = Options::group_barrier;
  constexpr bool kFastExp = Options::fast_exp, kDqBeforeDk = Options::dq_before_dk, kDvEarly = Options::dv_early;
  constexpr bool kDqTransposed = Options::dq_transposed, kOneDqBuffer = C::kDqStages == 1;
  constexpr int D = C::D, Br = C::kBr, Bc = C::kBc, NQ = Br / 8, ND = D / 8;
  static_assert(kDqTransposed ? (kDqBeforeDk && D / 64 == C::kGroups) : Br % 64 == 0,
                "dQ in blocks of 64 query rows, or transposed: one block of 64 columns of D per warpgroup");
  static_assert(!(kOneDqBuffer && kGroupBarrier), "one dQ buffer: its wait is passed on by the block barrier after dS");
  static_assert(!(kOrdered && Options::heavy_first), "the ordered dQ's turns assume each head's key tiles in turn");
  static_assert(!(kOrdered && Options::split_tail), "the ordered dQ's turns assume whole key tiles");
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (__cvta_generic_to_shared(smem_raw) & 1023)) & 1023);
  T* k_tile = reinterpret_cast<T*>(smem);
  T* v_tile = reinterpret_cast<T*>(smem + C::kKVBytes);
  T* qdo_tiles = reinterpret_cast<T*>(smem + 2 * C::kKVBytes);  // stage s: Q at 2s, dO at 2s + 1
  auto q_tile = [&](int s) { return qdo_tiles + (2 * s) * C::QTile::kElements; };
  auto do_tile = [&](int s) { return qdo_tiles + (2 * s + 1) * C::QTile::kElements; };
  T* ds_tile = reinterpret_cast<T*>(smem + 2 * C::kKVBytes + 2 * C::kStages * C::kQBytes);
  float* dq_tiles = reinterpret_cast<float*>(smem + 2 * C::kKVBytes + 2 * C::kStages * C::kQBytes + C::kDsBytes);
  // Step m's dQ part p (buffer m mod kDqStages): D / 32 boxes of Br × 32 floats.
  auto dq_part = [&](int m, int p) {
    return dq_tiles + ((m % C::kDqStages) * C::kDqParts + p) * (D / kFloatBoxColumns) * C::kDqBoxFloats;
  };
  float* rows = dq_tiles + C::kDqStages * C::kDqBytes / 4;
  auto lse2_tile = [&](int s) { return rows + (2 * s) * Br; };  // stage s: LSE·log2e, then D
  auto delta_tile = [&](int s) { return rows + (2 * s + 1) * Br; };
  std::uint64_t* kv_full = reinterpret_cast<std::uint64_t*>(rows + 2 * C::kStages * Br);
  std::uint64_t* qdo_full = kv_full + 1;  // [kStages]

  const int warp = threadIdx.x / 32, group = warp / 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  // The block's keys belong to K/V head kv_head (of B·Hkv); the query heads that share it, G =
  // heads_per_kv of them (1 without grouped heads), are kv_head·G .. kv_head·G + G − 1, and the
  // block walks the query tiles of each in turn, so that dK and dV sum over the group in registers.
  // Which key tile and head: in index order, or with the mask heavy first (block_order.hpp).
  long long block = blockIdx.x + static_cast<long long>(gridDim.x) * blockIdx.y;
  // split_tail: a block past the whole tiles walks part `part` of `pieces` of its key tile's steps.
  int part = 0, pieces = 1;
  if constexpr (Options::split_tail) {
    const BlockPiece piece = block_piece(block, split);
    if (piece.idle) return;  // the grid's padding after the last piece
    block = piece.tile;
    part = piece.part;
    pieces = piece.pieces;
  }
  const BlockTile mine = Options::heavy_first && a.causal
                             ? heavy_first_tile(block, static_cast<int>(gridDim.x), static_cast<int>(gridDim.y))
                             : index_order_tile(block, static_cast<int>(gridDim.x));
  const int kv_head = mine.kv_head;
  const int key_tile =
      kOrdered ? ordered_key_tile(a.causal, mine.key_tile, static_cast<int>(gridDim.x)) : mine.key_tile;
  const int j0 = key_tile * Bc;
  const bwd::QueryTiles tiles = bwd::query_tiles(j0, Bc, Br, a.seq_q, a.seq_k, a.causal);
  // The walk: every query tile of each query head of the group in turn; a piece takes steps
  // first_step .. first_step + steps − 1 of it (all of it where nothing is split), and counts its
  // steps m from 0 (the buffers' stages and phases).
  const int count = tiles.end - tiles.begin, walk = count * heads_per_kv;
  const int first_step = piece_first_step(walk, part, pieces);
  const int steps = piece_first_step(walk, part + 1, pieces) - first_step;
  auto q_head_of = [&](int m) { return kv_head * heads_per_kv + (first_step + m) / count; };  // step m's query head
  auto tile_of = [&](int m) { return tiles.begin + (first_step + m) % count; };               // and its query tile

  // One thread asks for step m's query tile (Q and dO by the TMA, its rows' LSE·log2e and D by two
  // bulk copies of Br floats: the arrays are padded to whole tiles, 256-byte aligned) into stage
  // m mod 2, all four completing on one mbarrier.
  auto load_qdo = [&](int m) {
    const int s = m % C::kStages, q0 = tile_of(m) * Br, q_head = q_head_of(m);
    const std::int64_t rows0 = static_cast<std::int64_t>(q_head) * a.seq_q_padded;
    barrier_expect_bytes(&qdo_full[s], 2 * tile_bytes<T, Br, D>() + C::kRowsBytes);
    load_tile_tma<T, Br, D>(q_tile(s), &maps.q, q0, q_head, &qdo_full[s]);
    load_tile_tma<T, Br, D>(do_tile(s), &maps.d_o, q0, q_head, &qdo_full[s]);
    cuda::ptx::cp_async_bulk(cuda::ptx::space_cluster, cuda::ptx::space_global, lse2_tile(s), a.lse2 + rows0 + q0,
                             C::kRowsBytes / 2, &qdo_full[s]);
    cuda::ptx::cp_async_bulk(cuda::ptx::space_cluster, cuda::ptx::space_global, delta_tile(s), a.delta + rows0 + q0,
                             C::kRowsBytes / 2, &qdo_full[s]);
  };
  if (threadIdx.x == 0) {
    barrier_init(kv_full, 1);
    for (int s = 0; s < C::kStages; ++s) barrier_init(&qdo_full[s], 1);
  }
  __syncthreads();  // the barriers initialized before anyone waits on them
  if (threadIdx.x == 0 && steps > 0) {
    barrier_expect_bytes(kv_full, 2 * tile_bytes<T, Bc, D>());
    load_tile_tma<T, Bc, D>(k_tile, &maps.k, j0, kv_head, kv_full);
    load_tile_tma<T, Bc, D>(v_tile, &maps.v, j0, kv_head, kv_full);
    load_qdo(0);
  }

  // Shared addresses for the descriptors: this warpgroup's 64 keys of K and V (8 KiB into each
  // column block: 64 rows of 128 bytes, a whole number of the swizzle's 8-row periods).
  const auto k_addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(k_tile));
  const auto v_addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(v_tile));
  const std::uint32_t k_rows = k_addr + group * 64 * 64 * sizeof(T), v_rows = v_addr + group * 64 * 64 * sizeof(T);
  const auto ds_addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(ds_tile));
  const int key_row0 = 64 * group + 16 * (warp % 4);  // the warp's first key of the block's Bc
  const int offset = a.seq_k - a.seq_q;                // bottom-right causal mask: key ≤ query + offset

  // ordered: the turn that thread 0's last additions took (query tile i of its head), handed on,
  // one count more, once those additions are done. Waiting for them right after their issue stalls
  // the block on the trip to L2 at every step; half a step later they should be done, and the next
  // key tile, which reaches the same query tile about a step later, should find its turn come.
  using Turn = cuda::atomic_ref<int, cuda::thread_scope_device>;
  int* taken_turn = nullptr;
  int next_count = 0;
  auto hand_on_turn = [&] {
    if (taken_turn == nullptr) return;
    cuda::ptx::cp_async_bulk_wait_group(cuda::ptx::n32_t<0>{});  // its additions done in L2
    cuda::ptx::fence_proxy_async(cuda::ptx::space_global);       // and ordered before the release
    Turn(*taken_turn).store(next_count, cuda::memory_order_release);
    taken_turn = nullptr;
  };

  float dv[ND][4] = {}, dk[ND][4] = {};
  if (steps > 0) barrier_wait(kv_full, 0);

  for (int m = 0; m < steps; ++m) {
    const int s = m % C::kStages, i = tile_of(m), q0 = i * Br, q_head = q_head_of(m);
    // Stage s ^ 1 was freed by the block barrier that ended step m − 1. dQ's buffer s was last
    // handed to the TMA at step m − 2: thread 0 waits until that reduce-add has read it (the one of
    // step m − 1 may still run); the block barrier after dS's stores passes that on to everyone.
    // (With one dQ buffer the wait is for step m − 1's, later: just before that barrier.)
    if (threadIdx.x == 0) {
      if (m + 1 < steps) load_qdo(m + 1);
      if constexpr (!kGroupBarrier && !kOneDqBuffer) cuda::ptx::cp_async_bulk_wait_group_read(cuda::ptx::n32_t<1>{});
    }
    barrier_wait(&qdo_full[s], static_cast<std::uint32_t>((m / C::kStages) & 1));  // Q_i, dO_i landed
    const auto q_addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(q_tile(s)));
    const auto do_addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(do_tile(s)));

    // Sᵀ = K·Q_iᵀ and dPᵀ = V·dO_iᵀ: two groups of D/16 wgmmas, issued back to back.
    float st[NQ][4], dpt[NQ][4];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      wgmma_ss<T, 0>(st, k_major_step<T>(k_rows, kk, Bc), k_major_step<T>(q_addr, kk, Br), kk > 0);
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      wgmma_ss<T, 0>(dpt, k_major_step<T>(v_rows, kk, Bc), k_major_step<T>(do_addr, kk, Br), kk > 0);
    wgmma_commit();

    // Pᵀ from Sᵀ while dPᵀ is still running. Element (e) of 8-query block j: key key_row0 + g
    // (+8 for e ≥ 2), query q0 + 8j + 2t (+1 for odd e). Padded and keyless rows have LSE·log2e =
    // +inf, so P = 0 there; keys past Nk and above the causal diagonal are masked here.
    wgmma_wait<1>();
    fence_accumulators(st);
    const bool masked = i < tiles.unmasked_from;
#pragma unroll
    for (int j = 0; j < NQ; ++j) {
      const float2 l2 = *reinterpret_cast<const float2*>(lse2_tile(s) + 8 * j + 2 * t);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float x = st[j][e] * a.scale_log2 - ((e & 1) ? l2.y : l2.x);
        float p = kFastExp ? ptx::ex2(x) : exp2f(x);
        if (masked) {
          const int key = j0 + key_row0 + g + (e >= 2 ? 8 : 0), query = q0 + 8 * j + 2 * t + (e & 1);
          if (key >= a.seq_k || (a.causal && key > query + offset)) p = 0.0f;
        }
        st[j][e] = p;
      }
    }
    // dV += Pᵀ·dO_i and dK += dSᵀ·Q_i, A from registers (the C→A identity: two 8-query blocks
    // are one 16-wide k-step), B MN-major.
    std::uint32_t pa[Br / 16][4], dsa[Br / 16][4];
    pack_accumulator_as_a<T>(pa, st);
    auto issue_dv = [&] {
#pragma unroll
      for (int ks = 0; ks < Br / 16; ++ks) wgmma_rs<T, 1>(dv, pa[ks], mn_major_step<T>(do_addr, ks, Br), 1);
    };
    if constexpr (kDvEarly) {  // dV now, its own group: it runs while dS is computed and stored
      wgmma_fence();           // pa written by ordinary instructions
      issue_dv();
      wgmma_commit();
      wgmma_wait<1>();  // dPᵀ done; dV may still run
    } else {
      wgmma_wait<0>();
    }
    fence_accumulators(dpt);
#pragma unroll
    for (int j = 0; j < NQ; ++j) {
      const float2 d = *reinterpret_cast<const float2*>(delta_tile(s) + 8 * j + 2 * t);
#pragma unroll
      for (int e = 0; e < 4; ++e) dpt[j][e] = st[j][e] * (dpt[j][e] - ((e & 1) ? d.y : d.x));  // dSᵀ
    }
    pack_accumulator_as_a<T>(dsa, dpt);
    // dS into shared memory, transposed (holes/ds_transpose.cuh): the thread's element (key, query)
    // of dSᵀ goes to row `query`, column `key` of the [Br][Bc] tile, the 16-bit value that dK's A
    // operand holds (the same rounding in dK and dQ). Stored before dK is issued: a wgmma's A
    // registers may not be read while it runs.
    if constexpr (kStmatrix)
      store_ds_transposed_x4<typename C::DsTile>(dsa, ds_tile, key_row0, lane);
    else
      store_ds_transposed<typename C::DsTile>(dsa, ds_tile, key_row0, g, t);
    wgmma_fence();  // pa, dsa written by ordinary instructions
    if constexpr (!kDvEarly) issue_dv();
    // dK += dSᵀ·Q, here or (dq_before_dk) behind dQ's products, below.
    auto issue_dk = [&] {
#pragma unroll
      for (int ks = 0; ks < Br / 16; ++ks) wgmma_rs<T, 1>(dk, dsa[ks], mn_major_step<T>(q_addr, ks, Br), 1);
    };
    if constexpr (!kDqBeforeDk) issue_dk();
    if constexpr (!(kDvEarly && kDqBeforeDk)) wgmma_commit();  // dV and/or dK: one group

    cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);  // dS's stores, visible to the tensor cores
    if (kOrdered && threadIdx.x == 0) hand_on_turn();       // step m − 1's turn, its additions done
    if (kOneDqBuffer && threadIdx.x == 0) cuda::ptx::cp_async_bulk_wait_group_read(cuda::ptx::n32_t<0>{});
    if constexpr (kGroupBarrier && C::kDqSplitsKeys)
      ptx::named_barrier_sync(1 + group, 128);  // this warpgroup's keys of dS stored: all its dQ reads
    else
      __syncthreads();  // every warpgroup's keys of dS stored (while dV and dK run)
    // dV and dK done before dQ is issued: a warpgroup's wgmmas run in order anyway, and pa and dsa,
    // kept live until here (the compiler must not give their registers to other values while the
    // wgmmas may still read them), are free for dQ's accumulator.
    if constexpr (!kDqBeforeDk) {
      wgmma_wait<0>();
      fence_accumulators(dv);
      fence_accumulators(dk);
      fence_operands(pa);
      fence_operands(dsa);
    }

    // With dq_before_dk, once a warpgroup's (one) dQ block is issued: dK queued behind it, and the
    // wait lets it run (the last group) while the block is stored; dV's group and dQ's are done.
    auto queue_dk_behind_dq = [&] {
      issue_dk();
      wgmma_commit();
      wgmma_wait<1>();
      fence_accumulators(dv);
      fence_operands(pa);
    };
    constexpr int kBlocks = C::kDqRowBlocks * C::kDqColumnBlocks;
    static_assert(kDqTransposed || !kDqBeforeDk || (C::kDqSplitsKeys ? kBlocks == 1 : kBlocks == C::kGroups),
                  "dq_before_dk: one dQ block per warpgroup (dK is issued behind it)");
    if constexpr (kDqTransposed) {
      // dQᵀ = Kᵀ·dSᵀ: this warpgroup's 64 columns of D (M) × the Br queries (N), over all Bc keys.
      // A is K's column block `group` read as its transpose (MN-major: D is K's contiguous
      // dimension), B is dS as stored ([queries][keys]: K-major, as Q is for Sᵀ = K·Qᵀ).
      float dqt[NQ][4];
      const std::uint32_t k_block = k_addr + group * Bc * 64 * sizeof(T);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < Bc / 16; ++ks)
        wgmma_ss_mn_major_a<T, 0>(dqt, mn_major_step<T>(k_block, ks, Bc), k_major_step<T>(ds_addr, ks, Br), ks > 0);
      wgmma_commit();
      queue_dk_behind_dq();
      fence_accumulators(dqt);
      // Element (j, e) is dQ[query 8j + 2t + (e & 1)][column 64·group + 16(warp mod 4) + g + 8(e ≥ 2)]:
      // one float per store. Column c sits in box c / 32 at 16-byte chunk (c mod 32) / 4 XOR
      // (row mod 8), and row mod 8 = 2t + (e & 1) for every j: four base addresses, rows 8j apart.
      // A warp's store writes 8 columns (two chunks) × 4 rows, the chunks XORed with four different
      // row residues: 8 distinct chunks, 32 banks, no conflict.
      float* part = dq_part(m, 0);
      float* at[2][2];
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int odd = 0; odd < 2; ++odd) {
          const int col = 64 * group + 16 * (warp % 4) + g + 8 * h, in_box = col % kFloatBoxColumns;
          const int row = 2 * t + odd;
          at[h][odd] = part + (col / kFloatBoxColumns) * C::kDqBoxFloats + row * kFloatBoxColumns +
                       (((in_box / 4) ^ row) * 4) + in_box % 4;
        }
#pragma unroll
      for (int j = 0; j < NQ; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) at[e >= 2][e & 1][8 * j * kFloatBoxColumns] = dqt[j][e];
    }
    // dQ_i = dS·K, a block of 64 rows × 64 columns of D at a time (M = N = 64), the accumulator
    // reused per block, stored into dQ's buffer (step m's): in row block rb, warp w's rows are
    // queries 64rb + 16(w mod 4) .. + 15 of the tile; column c of the tile is column c mod 32 of box
    // c / 32, whose 16-byte chunk k of row r sits at chunk k XOR (r mod 8). A store of a warp then
    // writes 8 rows × 32 bytes in 8 different chunk positions: two wavefronts, no conflict.
    constexpr int kSteps = C::kDqSplitsKeys ? 4 : Bc / 16;  // k-steps of 16 keys
    const int step0 = C::kDqSplitsKeys ? 4 * group : 0;  // this warpgroup's keys, or all of them
    const int block_first = C::kDqSplitsKeys ? 0 : group, block_stride = C::kDqSplitsKeys ? 1 : C::kGroups;
    for (int blk = block_first; !kDqTransposed && blk < kBlocks; blk += block_stride) {
      const int rb = blk / C::kDqColumnBlocks, cb = blk % C::kDqColumnBlocks;  // rows 64·rb.., columns 64·cb..
      float dq[8][4];
      const std::uint32_t ds_rows = ds_addr + rb * 64 * 64 * sizeof(T);  // row block rb of dS: 64 rows in
      const std::uint32_t k_block = k_addr + cb * Bc * 64 * sizeof(T);   // column block cb of K
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kSteps; ++ks)
        wgmma_ss<T, 1>(dq, k_major_step<T>(ds_rows, step0 + ks, Br), mn_major_step<T>(k_block, step0 + ks, Bc),
                       ks > 0);
      wgmma_commit();
      if constexpr (kDqBeforeDk)
        queue_dk_behind_dq();
      else
        wgmma_wait<0>();
      fence_accumulators(dq);
      float* part = dq_part(m, C::kDqSplitsKeys ? group : 0);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = 64 * rb + 16 * (warp % 4) + g + 8 * h;  // rows past Nq hold zeros; the TMA skips them
#pragma unroll
        for (int jd = 0; jd < 8; ++jd) {
          const int col = cb * 64 + 8 * jd + 2 * t, in_box = col % kFloatBoxColumns;
          float* at = part + (col / kFloatBoxColumns) * C::kDqBoxFloats + row * kFloatBoxColumns +
                      (((in_box / 4) ^ (row & 7)) * 4) + in_box % 4;
          *reinterpret_cast<float2*>(at) = make_float2(dq[jd][2 * h], dq[jd][2 * h + 1]);
        }
      }
    }
    if constexpr (kDqBeforeDk) {  // dK done (dsa free for the next step)
      wgmma_wait<0>();
      fence_accumulators(dk);
      fence_operands(dsa);
    }
    cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);  // dQ's stores, visible to the TMA
    // With kGroupBarrier the wait for dQ's other buffer (its reduce-add issued a step ago, the only
    // one pending) is passed on by this barrier, as the middle one no longer reaches every warp.
    if (kGroupBarrier && threadIdx.x == 0) cuda::ptx::cp_async_bulk_wait_group_read(cuda::ptx::n32_t<0>{});
    __syncthreads();  // every warpgroup done with stage s and with dS, dQ's buffer s written
    // One thread hands the tile's dQ to the TMA: each box added into the float32 accumulator in L2,
    // one bulk group per tile (waited for, for reading, two tiles on).
    if (threadIdx.x == 0) {
      if constexpr (kOrdered) {  // wait for this key tile's turn at query tile i
        taken_turn = dq_turns + std::int64_t{q_head} * query_tiles + i;
        const int my_turn = dq_turn(a.causal, key_tile, static_cast<int>(gridDim.x), q0, Br, Bc, a.seq_q, a.seq_k);
        while (Turn(*taken_turn).load(cuda::memory_order_acquire) != my_turn) {
        }
        cuda::ptx::fence_proxy_async(cuda::ptx::space_global);  // the earlier tiles' sums, seen by the TMA
        next_count = my_turn + 1;
      }
      for (int p = 0; p < C::kDqParts; ++p)
        for (int b = 0; b < D / kFloatBoxColumns; ++b) {
          const std::int32_t coords[3] = {b * kFloatBoxColumns, q0, q_head};
          cuda::ptx::cp_reduce_async_bulk_tensor(cuda::ptx::space_global, cuda::ptx::space_shared, cuda::ptx::op_add,
                                                 &maps.dq, coords, dq_part(m, p) + b * C::kDqBoxFloats);
        }
      cuda::ptx::cp_async_bulk_commit_group();
    }
  }
  // The last reduce-adds complete before the block ends (the conversion kernel reads the sums), and
  // with `ordered` the last turn is handed on.
  if (threadIdx.x == 0) {
    cuda::ptx::cp_async_bulk_wait_group(cuda::ptx::n32_t<0>{});
    if constexpr (kOrdered) hand_on_turn();
  }

  // split_tail, a piece: its share of dK (unscaled) and dV added into its tile's float32 sums,
  // two neighbouring columns per atomic; the launch scales and converts them after the kernel.
  if constexpr (Options::split_tail) {
    if (pieces > 1) {
      const std::int64_t row0 = (block - split.whole_blocks) * Bc;  // the tile's first row of the sums
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int key = key_row0 + g + 8 * h;
        if (j0 + key >= a.seq_k) continue;
#pragma unroll
        for (int jd = 0; jd < ND; ++jd) {
          const std::int64_t at = (row0 + key) * D + 8 * jd + 2 * t;
          atomicAdd(reinterpret_cast<float2*>(split.dk + at), make_float2(dk[jd][2 * h], dk[jd][2 * h + 1]));
          atomicAdd(reinterpret_cast<float2*>(split.dv + at), make_float2(dv[jd][2 * h], dv[jd][2 * h + 1]));
        }
      }
      return;
    }
  }

  // dK = τ·dSᵀQ, dV: this warp's 16 keys, two neighbouring columns per store.
  const std::int64_t first = static_cast<std::int64_t>(kv_head) * a.seq_k;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int key = j0 + key_row0 + g + 8 * h;
    if (key >= a.seq_k) continue;
#pragma unroll
    for (int jd = 0; jd < ND; ++jd) {
      const std::int64_t at = (first + key) * D + 8 * jd + 2 * t;
      *reinterpret_cast<std::uint32_t*>(a.dk + at) = ptx::pack2<T>(a.scale * dk[jd][2 * h], a.scale * dk[jd][2 * h + 1]);
      *reinterpret_cast<std::uint32_t*>(a.dv + at) = ptx::pack2<T>(dv[jd][2 * h], dv[jd][2 * h + 1]);
    }
  }
}

}  // namespace fa::step10
