// Stage 08's kernel — the FlashAttention-2 backward on tensor cores: fp16 or bf16 Q, K, V, O, dO,
// float32 accumulators, mma.sync.m16n8k16 for all five products. The key-tile kernel here is the
// top rung of the ladder (ladder/ladder.cuh); around it run the rows' preprocessing and dQ's
// conversion (row_kernels.cuh), and with --deterministic the dQ kernel (backward_dq_kernel.cuh).
//
// What changed from stage 06 (steps/06_cuda_backward/flash_backward.cu): the loop is the same
// (one block per K/V tile, K_j and V_j resident, query tiles streamed, P recomputed from the saved
// LSE, dQ by float atomics); the products moved from float32 FMAs to tensor cores, and with them
// the data: the operands come from swizzled tiles by ldmatrix (fa/cuda/tc/tile_ops.cuh), and the
// softmax's gradient happens on accumulator fragments. What changed from stage 07's forward
// (07_tensor_cores/flash_tc_kernel.cuh): the warps own keys, not queries.
//
//   block: Bc keys; warp w owns a key block of 16·KM keys (KM = 1 or 2, BackwardConfig) and its
//   rows of dK, dV. Per query tile i of Br queries:
//     Sᵀ  = K_w Q_iᵀ      16·KM keys × Br queries   A: K (ldmatrix), B: Q rows as columns (ldmatrix)
//     dPᵀ = V_w dO_iᵀ     16·KM × Br                A: V, B: dO rows as columns
//     Pᵀ  = 2^(Sᵀ·τlog2e − LSE_i·log2e),  dSᵀ = Pᵀ ∘ (dPᵀ − D_i)     on the accumulators
//     dV_w += Pᵀ dO_i     A: Pᵀ packed to 16 bits in registers (the C→A identity of stage 07)
//     dK_w += dSᵀ Q_i     A: dSᵀ packed, B: Q (ldmatrix.trans: k runs along Q's rows)
//     dSᵀ → shared memory; then warp w owns 16·QM queries of the tile and a column block of D:
//     dQ_i += dS K_j      A: dS (ldmatrix.trans of the stored dSᵀ), B: K (ldmatrix.trans)
//                         added to a float32 dQ in global memory with atomics
//   A pair (D = 128, 256): two warps share each key block and divide the products. The S warp
//   computes Sᵀ, Pᵀ and dV_w, the dP warp dPᵀ, dSᵀ and dK_w; Pᵀ crosses from one to the other
//   through shared memory. The dP warps signal dSᵀ on a named barrier (fa/cuda/ptx/barrier.cuh)
//   as soon as it is stored and go on to dK; the S warps wait for the signal only before dQ.
//   (--deterministic: the same kernel without the dQ part, kAtomicDq = false, then
//   backward_dq_kernel, which turns the loop around to compute dQ in registers in a fixed order.)
//
// Computing Sᵀ rather than S is the design decision: Pᵀ and dSᵀ are then
// born in the accumulator layout of the two products that sum over queries (dV, dK), so they stay
// in registers; only dS makes one trip through shared memory, for the product that sums over
// keys (dQ). Q_{i+1}, dO_{i+1} and their rows' LSE and D are copied (cp.async) while tile i is
// computed: two buffers each.
//
// What sets the speed is shared memory: every fragment read by ldmatrix serves a few mma's. A warp
// of 16 keys reads 5 fragments for 8 mma's of Sᵀ (one of K, four of Q); of 32 keys, 6 for 16. Per
// query tile that is 0.58 fragments per mma with 16 keys a warp (D = 128) and 0.45 with 32
// (D = 64), which the tile shapes in tensor_core_backward.cu are measured against. At D = 128 a warp
// cannot hold 32 keys' dK and dV (256 accumulators), so two warps share 32 keys. Dividing the
// products between them (rather than the queries of Sᵀ and dPᵀ and the columns of dK and dV, the
// first version) reads 120 fragments a warp per query tile instead of 144: each warp reads only K
// or only V, and in the second product only dO or only Q (docs/results/step08_pairing_h100.txt).
// Then the barriers: a __syncthreads before dQ made each side wait for the other's second product;
// the named barrier lets the S warps' dV product run beside the dP warps' dK product, 1.03-1.04×
// the kernel at 16k keys (docs/results/step08_named_barriers_h100.txt).
//
// What it adds to the rung below (diff ladder/v7_named_barrier.cuh against this file): the grid
// order. With key_tiles_first the grid's fast axis is a head's key tiles, so that the blocks
// running at once share one head's Q, dO and dQ rows in L2; else the heads, as in v1 .. v7. The
// host chooses by shape (StageConfigOf in tensor_core_backward.cu); the kernel reads the flag to
// tell its head and key tile. (Also the deterministic mode's switch, kAtomicDq, which no rung has.)
// Predicted (written before it was measured, from step08_tune's runs of the two orders,
//   tensor_core_backward.cu): D = 64 1.02-1.08x v7 without the mask, 1.00x causal (heads first
//   there); D = 128 1.03-1.08x without the mask, causal 1.00x below 16k keys, 1.04x at 16k.
// Measured (one H100, bf16, the paper shapes at 4k and 16k, docs/results/step08_ladder_rungs_h100/,
//   where v7 is named v6_named_barrier): D = 64 1.07x v7 at 4k without the mask, 0.98x at 16k,
//   0.95-0.96x causal; D = 128 1.04x at 4k without the mask, 0.99x elsewhere. The grid order pays
//   only at 4k without the mask; causal at D = 64 the stage's kernel ran 4-5 % behind v7 with the
//   same order (heads first): reading the order at run time is the suspect
//   (docs/notes/08_tensor_core_backward.md).
//
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "08_tensor_core_backward/backward_tiles.cuh"
#include <fragment_gradient.cuh>  // holes/: the hole of exercise ex08
#include "fa/cuda/ptx/barrier.cuh"
#include "fa/cuda/ptx/cp_async.cuh"
#include "fa/cuda/ptx/ldmatrix.cuh"
#include "fa/cuda/ptx/mma.cuh"
#include "fa/cuda/tc/tile_ops.cuh"

namespace fa::step08 {

using tc::SwizzledTile;
using tc::swizzled_at;  // the ldmatrix address of a step of a swizzled tile

// The tile shape: head dim D, kWarps warps of kKeyBlocks·16 keys each (Bc = 16·kKeyBlocks·kWarps keys
// per block), query tiles of kBr. A warp's Sᵀ and dPᵀ are kKeyBlocks·16 × Br, its dK and dV
// kKeyBlocks·16 × D: the accumulators (2·kKeyBlocks·(Br + D)/2 floats a thread) pick the shape. A
// fragment of Q or dO read from shared memory feeds kKeyBlocks row blocks of keys, so 32 keys a warp
// read half the shared memory per product of 16 (D = 64: 32 keys × 32 queries fits where 32 × 64 does
// not). kSplit = 2: two warps share each key block, which D = 128 needs for 32 keys a warp (256
// accumulators otherwise) and D = 256 for 16. They divide the products: the S warp computes Sᵀ, Pᵀ
// and dV of the block's keys, the dP warp dPᵀ, dSᵀ and dK, each over all Br queries and all of D
// (16·kKeyBlocks × D accumulators a warp, as with kSplit = 1 and half the keys). In the dQ product
// (Br queries × D) warp w owns kDqBlocks·16 queries from 16·kDqBlocks·(w mod kDqGroups) and the
// (w / kDqGroups)-th column block of D.
template <int D_, int kWarps_, int kMinBlocks_, int kKeyBlocks_ = 1, int kBr_ = 64, int kDqBlocks_ = 1,
          int kSplit_ = 1>
struct BackwardConfig {
  static constexpr int D = D_, kWarps = kWarps_, kMinBlocks = kMinBlocks_, kKeyBlocks = kKeyBlocks_;
  static constexpr int kSplit = kSplit_;  // warps per key block
  static constexpr int kThreads = 32 * kWarps, kBc = 16 * kKeyBlocks * kWarps / kSplit, kBr = kBr_;
  static_assert(kSplit == 1 || (kSplit == 2 && kWarps % 2 == 0), "a warp or a pair of warps per key block");
  static constexpr int kDqBlocks = kDqBlocks_;                // 16-query row blocks per warp in dQ
  static constexpr int kDqGroups = kBr / (16 * kDqBlocks);    // warps along the queries of dQ
  static constexpr int kDqCols = D / (kWarps / kDqGroups);    // dQ columns per warp
  static_assert(kBr % 32 == 0 && kBr % (16 * kDqBlocks) == 0 && kWarps % kDqGroups == 0 && kDqCols % 16 == 0,
                "dQ: kDqGroups warps per column block of a multiple of 16");
  using KVTile = SwizzledTile<kBc, D>;
  using QTile = SwizzledTile<kBr, D>;
  using DsTile = SwizzledTile<kBc, kBr>;  // dSᵀ: a row per key, a column per query (Br = 32: padded
                                          // to 64 columns, so that rows stay 128-byte swizzle rows)
  // The launch: one block per (head, tile of Bc keys); a head's key tiles on x when key_tiles_first
  // (BackwardArgs::key_tiles_first, which the kernel reads to tell its head and key tile).
  static dim3 grid(std::int64_t heads, std::int64_t seq_k, bool key_tiles_first) {
    const unsigned h = static_cast<unsigned>(heads), tiles = static_cast<unsigned>((seq_k + kBc - 1) / kBc);
    return key_tiles_first ? dim3(tiles, h) : dim3(h, tiles);
  }
  // K, V; two buffers of Q and of dO; dSᵀ (and, with a pair, Pᵀ in fp16); two buffers of the rows'
  // LSE·log2e and D.
  static constexpr int kSmemBytes =
      (2 * KVTile::kElements + 4 * QTile::kElements + (kSplit > 1 ? 2 : 1) * DsTile::kElements) * 2 +
      2 * 2 * kBr * 4;
};

// kAtomicDq = false: dK and dV only (the deterministic mode: dQ by backward_dq_kernel, below).
template <class T, class C, bool kAtomicDq = true>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks) backward_tc_kernel(const BackwardArgs<T> a) {
  constexpr int D = C::D, Bc = C::kBc, Br = C::kBr, KM = C::kKeyBlocks, S = C::kSplit;
  constexpr int NQ = Br / 8, DT = D / 8;  // 8-column tiles of Sᵀ (queries) and of dK, dV (D)
  using KVTile = typename C::KVTile;
  using QTile = typename C::QTile;
  extern __shared__ __align__(128) unsigned char smem[];
  // Shared memory by 32-bit shared-window addresses (stage 07): K, V, Q[2], dO[2], dSᵀ, (Pᵀ,)
  // LSE2[2], D[2].
  constexpr std::uint32_t kKV = KVTile::kElements * sizeof(T), kQ = QTile::kElements * sizeof(T);
  constexpr std::uint32_t kDs = C::DsTile::kElements * sizeof(T);
  const std::uint32_t k_tile = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
  const std::uint32_t v_tile = k_tile + kKV, q_tiles = v_tile + kKV, do_tiles = q_tiles + 2 * kQ;
  const std::uint32_t ds_tile = do_tiles + 2 * kQ, p_tile = ds_tile + kDs;  // p_tile: a pair only
  unsigned char *ds_generic = smem + (ds_tile - k_tile), *p_generic = smem + (p_tile - k_tile);
  const std::uint32_t rows_tiles = ds_tile + (S > 1 ? 2 : 1) * kDs;
  float* rows_s = reinterpret_cast<float*>(smem + (rows_tiles - k_tile));  // [2][2][Br]

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  // Key block kw. A pair: warps kw and kw + kWarps/2, the S warp and the dP warp (part 0, 1). Warp w
  // issues from the SM's scheduler w mod 4, so each scheduler gets both roles and the exponentials
  // (S warps) and dSᵀ (dP warps) spread over all four.
  const int kw = S == 2 ? warp % (C::kWarps / 2) : warp;
  const int part = S == 2 ? warp / (C::kWarps / 2) : 0;
  // The grid: key_tiles_first, (key tiles, heads), else (heads, key tiles).
  const int key_tile = static_cast<int>(a.key_tiles_first ? blockIdx.x : blockIdx.y);
  const std::int64_t head = a.key_tiles_first ? blockIdx.y : blockIdx.x;
  const int j0 = key_tile * Bc, key0 = j0 + 16 * KM * kw;  // the block's and this warp's first key
  const T* q = a.q + head * a.seq_q * D;
  const T* d_o = a.d_o + head * a.seq_q * D;
  const T* k = a.k + head * a.seq_k * D;
  const T* v = a.v + head * a.seq_k * D;
  const float* lse2 = a.lse2 + head * a.seq_q_padded;
  const float* delta = a.delta + head * a.seq_q_padded;
  const QueryTiles qt = query_tiles(j0, Bc, Br, a.seq_q, a.seq_k, a.causal);

  // ldmatrix row addresses, one register per pattern, step k = XOR 32·k (stage 07's kernel):
  //   "A": rows lane mod 16, chunk half lane / 16 (an A operand stored row-major, or .trans of
  //        a B operand whose k runs along the stored rows: K, V as A; Q, dO, K as .trans B)
  //   "B": rows lane mod 8 + 8·(lane / 16), chunk half (lane / 8) mod 2 (a B operand whose n runs
  //        along the stored rows: Q, dO for Sᵀ, dPᵀ; and dSᵀ read .trans as dS's A operand)
  const int chunk_a = (lane / 16) ^ (lane % 8), chunk_b = (lane / 8 % 2) ^ (lane % 8);
  const int row_a = lane % 16, row_b = lane % 8 + 8 * (lane / 16);
  // (Row and column-block offsets are multiples of 8 rows or of a block: they commute with the XOR.)
  const std::uint32_t key_rows_a = sizeof(T) * ((16 * KM * kw + row_a) * 64 + chunk_a * 8);  // + 16·mi rows
  const std::uint32_t k_as_a = k_tile + key_rows_a, v_as_a = v_tile + key_rows_a;
  const std::uint32_t k_as_bt = k_tile + sizeof(T) * (row_a * 64 + chunk_a * 8);   // + 16·ks rows
  const std::uint32_t qdo_as_b = sizeof(T) * (row_b * 64 + chunk_b * 8);   // + the tile
  const std::uint32_t qdo_as_bt = sizeof(T) * (row_a * 64 + chunk_a * 8);  // + the tile
  // dSᵀ as dS's A operand, row block qm: key rows 16·ks + row_b, query columns
  // dq_rows + 16·qm + 8·((lane / 8) mod 2).
  constexpr int QM = C::kDqBlocks;
  const int dq_rows = 16 * QM * (warp % C::kDqGroups), dq_col0 = C::kDqCols * (warp / C::kDqGroups);  // this warp's dQ_i
  std::uint32_t ds_as_a[QM];
#pragma unroll
  for (int qm = 0; qm < QM; ++qm) {
    const int ds_chunk = dq_rows / 8 + 2 * qm + lane / 8 % 2;
    ds_as_a[qm] = ds_tile + sizeof(T) * ((ds_chunk / 8) * (Bc * 64) + row_b * 64 + (((ds_chunk % 8) ^ (lane % 8)) * 8));
  }

  // dK and dV of this warp's keys (row block mi: keys key0 + 16·mi ..). In a pair a warp has one
  // of them: the same registers are dV in the S warp and dK in the dP warp.
  float accumulators[S == 2 ? 1 : 2][KM][DT][4] = {};
  float(&dv)[KM][DT][4] = accumulators[0];
  float(&dk)[KM][DT][4] = accumulators[S == 2 ? 0 : 1];

  if (qt.begin < qt.end) {
    tc::load_tile_async<KVTile, Bc, D, C::kThreads>(k_tile, k, j0, a.seq_k);
    tc::load_tile_async<KVTile, Bc, D, C::kThreads>(v_tile, v, j0, a.seq_k);
  }
  // Q_i, dO_i and the rows' LSE·log2e and D of query tile i into buffer b.
  auto load_query_tile = [&](int i, int b) {
    tc::load_tile_async<QTile, Br, D, C::kThreads>(q_tiles + b * kQ, q, i * Br, a.seq_q);
    tc::load_tile_async<QTile, Br, D, C::kThreads>(do_tiles + b * kQ, d_o, i * Br, a.seq_q);
    // 2·Br floats: Br / 4 16-byte chunks each, from the padded arrays (no bound to check).
    for (int c = threadIdx.x; c < Br / 2; c += C::kThreads) {
      const float* from = c < Br / 4 ? lse2 + i * Br + 4 * c : delta + i * Br + 4 * (c - Br / 4);
      ptx::cp_async16(rows_tiles + (b * 2 * Br + 4 * c) * 4u, from, true);
    }
  };
  // The blocks of one head would all start at the same query tile and add to the same dQ rows at
  // the same time; each starts at its own instead (key tile index mod the count) and wraps around.
  // The sum does not depend on the order.
  const int count = qt.end - qt.begin, first = count > 0 ? key_tile % count : 0;
  auto tile_at = [&](int n) { return qt.begin + (first + n) % count; };
  if (count > 0) load_query_tile(tile_at(0), 0);
  ptx::cp_async_commit();

  for (int n = 0; n < count; ++n) {
    const int i = tile_at(n), b = n & 1;
    ptx::cp_async_wait<0>();  // K, V (first tile) and this tile's Q, dO, LSE, D have landed ...
    __syncthreads();          // ... for every thread; and every warp is done with the tile before
    if (n + 1 < count) load_query_tile(tile_at(n + 1), b ^ 1);
    ptx::cp_async_commit();
    const std::uint32_t q_tile = q_tiles + b * kQ, do_tile = do_tiles + b * kQ;
    const float* lse2_s = rows_s + b * 2 * Br;
    const float* delta_s = lse2_s + Br;
    // Scores are masked (−inf: P = 0) where a key is past Nk or, causal, after the query. This
    // thread holds keys key0 + 16·mi + g (e < 2) and + 8, queries 8n + 2t and + 1 of the
    // tile (e even, odd).
    auto mask = [&](float(&st)[KM][NQ][4]) {
      if (i >= qt.unmasked_from) return;
#pragma unroll
      for (int mi = 0; mi < KM; ++mi)
#pragma unroll
        for (int n = 0; n < NQ; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = key0 + 16 * mi + g + (e >= 2 ? 8 : 0);
            const int query = i * Br + 8 * n + 2 * t + (e & 1);
            if (key >= a.seq_k || (a.causal && key > query + a.seq_k - a.seq_q)) st[mi][n][e] = -INFINITY;
          }
    };
    // Pᵀ or dSᵀ of step ks, packed by pack_a, stored to a Bc × Br tile: keys key0 + 16·mi + g (+8),
    // queries 16ks + 8·half + 2t.
    auto store = [&](unsigned char* tile, const std::uint32_t(&frag)[4], int mi, int ks) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int chunk = 2 * ks + half;  // the query column's 16-byte chunk
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = 16 * (KM * kw + mi) + g + 8 * r;  // row mod 8 = g
          *reinterpret_cast<std::uint32_t*>(
              tile + sizeof(T) * ((chunk / 8) * (Bc * 64) + row * 64 + (((chunk % 8) ^ g) * 8) + 2 * t)) =
              frag[2 * half + r];
        }
      }
    };

    if constexpr (S == 2) {
      // The pair divides the products. Both first products are 16·KM keys × Br queries over D, both
      // second ones 16·KM keys × D over Br queries: one code runs both, on the warp's own operands.
      //   S warp  (part 0): Sᵀ = K_w Q_iᵀ,  Pᵀ,                        dV_w += Pᵀ dO_i
      //   dP warp (part 1): dPᵀ = V_w dO_iᵀ, dSᵀ = Pᵀ ∘ (dPᵀ − D_i),    dK_w += dSᵀ Q_i
      // Pᵀ crosses from the S warp to the dP warp through shared memory, in fp16 whatever T is: it
      // lies in [0, 1], where fp16 carries 3 more bits than bf16, so dSᵀ is rounded about as if
      // computed from the float32 Pᵀ. dSᵀ goes to shared memory for dQ, as without a pair.
      const bool s_warp = part == 0;
      float(&gradient)[KM][DT][4] = accumulators[0];  // dV (S warp) or dK (dP warp)
      // K or V (the tile after K), Q or dO (the two buffers after Q's), dO or Q.
      const std::uint32_t first_a = k_as_a + part * kKV;
      const std::uint32_t first_b = q_tile + part * (2 * kQ) + qdo_as_b;
      const std::uint32_t second_b = q_tile + (1 - part) * (2 * kQ) + qdo_as_bt;
      float x[KM][NQ][4] = {};  // Sᵀ (S warp) or dPᵀ (dP warp)
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        std::uint32_t xa[KM][4];
#pragma unroll
        for (int mi = 0; mi < KM; ++mi) ptx::ldmatrix_x4(xa[mi], swizzled_at<T>(first_a, kk, mi, Bc));
#pragma unroll
        for (int np = 0; np < NQ / 2; ++np) {
          std::uint32_t xb[4];
          ptx::ldmatrix_x4(xb, swizzled_at<T>(first_b, kk, np, Br));
#pragma unroll
          for (int mi = 0; mi < KM; ++mi) {
            ptx::mma_m16n8k16<T>(x[mi][2 * np], xa[mi], {xb[0], xb[1]});
            ptx::mma_m16n8k16<T>(x[mi][2 * np + 1], xa[mi], {xb[2], xb[3]});
          }
        }
      }
      if (s_warp) {
        mask(x);
#pragma unroll
        for (int mi = 0; mi < KM; ++mi) probabilities<NQ>(x[mi], lse2_s, a.scale_log2);
#pragma unroll
        for (int mi = 0; mi < KM; ++mi)
#pragma unroll
          for (int ks = 0; ks < NQ / 2; ++ks) {
            std::uint32_t p16[4];
            pack_a<__half>(x, mi, ks, p16);
            store(p_generic, p16, mi, ks);
          }
      }
      __syncthreads();  // Pᵀ complete
      if (!s_warp) {  // dSᵀ = Pᵀ ∘ (dPᵀ − D), over x
#pragma unroll
        for (int mi = 0; mi < KM; ++mi)
#pragma unroll
          for (int ks = 0; ks < NQ / 2; ++ks) {
            std::uint32_t p16[4];  // the fp16 A fragment: the same element places as two C fragments
            ptx::ldmatrix_x4(p16, swizzled_at<T>(p_tile + key_rows_a, ks, mi, Bc));
            score_gradient(p16, x[mi][2 * ks], x[mi][2 * ks + 1], delta_s + 16 * ks);
          }
      }
      // Pᵀ or dSᵀ packed as the second product's A fragments, all of them before it, so that x
      // (twice the registers) is no longer live there. (Both warps carry x, not packed fragments,
      // across the barrier: the two roles share one register allocation, and the S warp's packed
      // Pᵀ beside the dP warp's dPᵀ would not fit.)
      std::uint32_t frag[KM][NQ / 2][4];
#pragma unroll
      for (int mi = 0; mi < KM; ++mi)
#pragma unroll
        for (int ks = 0; ks < NQ / 2; ++ks) pack_a<T>(x, mi, ks, frag[mi][ks]);
      if (kAtomicDq && !s_warp) {  // dSᵀ to shared memory, for dQ; signalled at once (barrier 1)
#pragma unroll
        for (int mi = 0; mi < KM; ++mi)
#pragma unroll
          for (int ks = 0; ks < NQ / 2; ++ks) store(ds_generic, frag[mi][ks], mi, ks);
        ptx::named_barrier_arrive(1, C::kThreads);
      }
#pragma unroll
      for (int ks = 0; ks < NQ / 2; ++ks) {
#pragma unroll
        for (int dp = 0; dp < DT / 2; ++dp) {
          std::uint32_t yb[4];
          ptx::ldmatrix_x4_trans(yb, swizzled_at<T>(second_b, dp, ks, Br));
#pragma unroll
          for (int mi = 0; mi < KM; ++mi) {
            ptx::mma_m16n8k16<T>(gradient[mi][2 * dp], frag[mi][ks], {yb[0], yb[1]});
            ptx::mma_m16n8k16<T>(gradient[mi][2 * dp + 1], frag[mi][ks], {yb[2], yb[3]});
          }
        }
      }
    } else {
      // Sᵀ = K_w Q_iᵀ and dPᵀ = V_w dO_iᵀ: 16·KM keys × Br queries each, D/16 steps of k = 16.
      // (The pair's first product above is this loop with one product instead of two. One helper
      // for both changed ptxas's schedule and cost D = 64 2-3 % in one A/B run, so each is written
      // out: docs/notes/08_tensor_core_backward.md.)
      float st[KM][NQ][4] = {}, dpt[KM][NQ][4] = {};
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        std::uint32_t ka[KM][4], va[KM][4];
#pragma unroll
        for (int mi = 0; mi < KM; ++mi) {
          ptx::ldmatrix_x4(ka[mi], swizzled_at<T>(k_as_a, kk, mi, Bc));
          ptx::ldmatrix_x4(va[mi], swizzled_at<T>(v_as_a, kk, mi, Bc));
        }
#pragma unroll
        for (int np = 0; np < NQ / 2; ++np) {
          std::uint32_t qb[4], db[4];
          ptx::ldmatrix_x4(qb, swizzled_at<T>(q_tile + qdo_as_b, kk, np, Br));
          ptx::ldmatrix_x4(db, swizzled_at<T>(do_tile + qdo_as_b, kk, np, Br));
#pragma unroll
          for (int mi = 0; mi < KM; ++mi) {
            ptx::mma_m16n8k16<T>(st[mi][2 * np], ka[mi], {qb[0], qb[1]});
            ptx::mma_m16n8k16<T>(st[mi][2 * np + 1], ka[mi], {qb[2], qb[3]});
            ptx::mma_m16n8k16<T>(dpt[mi][2 * np], va[mi], {db[0], db[1]});
            ptx::mma_m16n8k16<T>(dpt[mi][2 * np + 1], va[mi], {db[2], db[3]});
          }
        }
      }

      mask(st);
      // Pᵀ and dSᵀ on the accumulators (fragment_gradient.cuh).
#pragma unroll
      for (int mi = 0; mi < KM; ++mi)
        probabilities_and_score_gradient<NQ>(st[mi], dpt[mi], lse2_s, delta_s, a.scale_log2);

      // Pᵀ and dSᵀ are A operands straight from the accumulators (dSᵀ also goes to shared memory,
      // for the dQ product): dV_w += Pᵀ dO_i and dK_w += dSᵀ Q_i, step ks of k = 16 queries.
#pragma unroll
      for (int ks = 0; ks < NQ / 2; ++ks) {
        std::uint32_t pa[KM][4], da[KM][4];
#pragma unroll
        for (int mi = 0; mi < KM; ++mi) {
          pack_a<T>(st, mi, ks, pa[mi]);
          pack_a<T>(dpt, mi, ks, da[mi]);
          if constexpr (kAtomicDq) store(ds_generic, da[mi], mi, ks);
        }
#pragma unroll
        for (int dp = 0; dp < DT / 2; ++dp) {
          std::uint32_t ob[4], qb[4];
          ptx::ldmatrix_x4_trans(ob, swizzled_at<T>(do_tile + qdo_as_bt, dp, ks, Br));
          ptx::ldmatrix_x4_trans(qb, swizzled_at<T>(q_tile + qdo_as_bt, dp, ks, Br));
#pragma unroll
          for (int mi = 0; mi < KM; ++mi) {
            ptx::mma_m16n8k16<T>(dv[mi][2 * dp], pa[mi], {ob[0], ob[1]});
            ptx::mma_m16n8k16<T>(dv[mi][2 * dp + 1], pa[mi], {ob[2], ob[3]});
            ptx::mma_m16n8k16<T>(dk[mi][2 * dp], da[mi], {qb[0], qb[1]});
            ptx::mma_m16n8k16<T>(dk[mi][2 * dp + 1], da[mi], {qb[2], qb[3]});
          }
        }
      }
    }
    if constexpr (!kAtomicDq) continue;
    // dSᵀ complete. A pair: the S warps wait for the dP warps' signal, given before their dK
    // product, so the S warps' dV product overlaps it; the dP warps wait only for each other. The
    // __syncthreads at the top of the next tile still keeps either role from overwriting Pᵀ or dSᵀ
    // while the other reads them. (Pᵀ keeps its __syncthreads: why, in fa/cuda/ptx/barrier.cuh.)
    if constexpr (S == 1)
      __syncthreads();
    else if (part == 0)
      ptx::named_barrier_sync(1, C::kThreads);
    else
      ptx::named_barrier_sync(2, C::kThreads / 2);

    // dQ_i (this warp's 16·QM queries × kDqCols) = dS K_j: Bc/16 steps of k = 16 keys, then atomics.
    constexpr int QT = C::kDqCols / 8;
    float dq[QM][QT][4] = {};
#pragma unroll
    for (int ks = 0; ks < Bc / 16; ++ks) {
      std::uint32_t sa[QM][4];
#pragma unroll
      for (int qm = 0; qm < QM; ++qm) ptx::ldmatrix_x4_trans(sa[qm], ds_as_a[qm] + sizeof(T) * (16 * ks * 64));
#pragma unroll
      for (int dp = 0; dp < QT / 2; ++dp) {
        std::uint32_t kb[4];
        ptx::ldmatrix_x4_trans(kb, swizzled_at<T>(k_as_bt, dq_col0 / 16 + dp, ks, Bc));  // a per-warp step
#pragma unroll
        for (int qm = 0; qm < QM; ++qm) {
          ptx::mma_m16n8k16<T>(dq[qm][2 * dp], sa[qm], {kb[0], kb[1]});
          ptx::mma_m16n8k16<T>(dq[qm][2 * dp + 1], sa[qm], {kb[2], kb[3]});
        }
      }
    }
#pragma unroll
    for (int qm = 0; qm < QM; ++qm)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int query = i * Br + dq_rows + 16 * qm + g + 8 * r;
        if (query >= a.seq_q) continue;
        float* row = a.dq_accum + (head * a.seq_q + query) * D + dq_col0 + 2 * t;
#pragma unroll
        for (int n = 0; n < QT; ++n) add_to_dq(row + 8 * n, dq[qm][n][2 * r], dq[qm][n][2 * r + 1]);
      }
  }

  // dK = τ·dSᵀQ and dV, this warp's 16·KM keys (rows ≥ Nk are not written). A key tile that no
  // query sees writes zeros.
#pragma unroll
  for (int mi = 0; mi < KM; ++mi)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int key = key0 + 16 * mi + g + 8 * r;
      if (key >= a.seq_k) continue;
      const std::int64_t at_row = (head * a.seq_k + key) * D + 2 * t;
      // In a pair the S warp has dV and the dP warp dK (in the same registers).
      const bool write_dk = S == 1 || part == 1, write_dv = S == 1 || part == 0;
#pragma unroll
      for (int n = 0; n < DT; ++n) {
        if (write_dk)
          *reinterpret_cast<std::uint32_t*>(a.dk + at_row + 8 * n) =
              ptx::pack2<T>(dk[mi][n][2 * r] * a.scale, dk[mi][n][2 * r + 1] * a.scale);
        if (write_dv)
          *reinterpret_cast<std::uint32_t*>(a.dv + at_row + 8 * n) = ptx::pack2<T>(dv[mi][n][2 * r], dv[mi][n][2 * r + 1]);
      }
    }
}

}  // namespace fa::step08
