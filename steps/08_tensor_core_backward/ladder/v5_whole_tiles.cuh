// v5_whole_tiles — v4 with every copy made the way stage 07's kernel makes it: whole K, V, Q and dO
// tiles by cp.async (load_tile_async) from one pointer plus per-copy constants, with no bound check
// but on a last, partial tile, into shared memory named by 32-bit shared-window addresses
// throughout; K and V, copied once per block, by cp.async too (v1 .. v4 copy them synchronously).
// And the file is written the way the stage's kernel is, which the rungs above grow into: one
// V5Config for the tile shape, the key and dQ row blocks counted (KM, QM: 1 at this rung's shape,
// so the loops over them vanish). The arithmetic and its order are v4's.
//
// What changed from v4 (diff ladder/v4_registers.cuh against this file): the copies and the
// addresses they take, as above; the config; the mask and dSᵀ's store as lambdas over the row
// blocks; dSᵀ's dQ address for a Br of more than 64 columns.
//
// Shape: 8 warps of 16 keys (Bc = 128), query tiles of 64, grid (heads, key tiles), D = 64 and 128:
// v1 .. v4's.
// Predicted (written before this rung was measured): 1.00-1.03x v4. Per query tile a thread copies
//   4 (D = 64) or 8 (D = 128) 16-byte chunks of Q and dO while its warp issues 160 or 320 mma's,
//   so the bound checks and address arithmetic the whole-tile copies save are a small share of the
//   loop; K and V are copied once per block. (Stage 07's kernel gained 0-17 % from its copies and
//   its ldmatrix addresses together; here v2 already has the addresses.)
// Measured (one H200, every rung verified in one run, N = 4096, not causal,
//   docs/results/step08_ladder_split_h200/step08_ladder_d64.json and _d128.json): 1.00x v4 at
//   D = 64 (227.4 TFLOP/s), 0.99x at D = 128 (255.9): at the prediction's bottom and just under it,
//   within the 2-3 % that run's few repetitions resolve. Before v4 was split from it, v3 → here was
//   one step, named v4_registers in docs/results/step08_ladder_*.json (run there as the stage's
//   kernel at this shape: the same code but for reading the grid order, a flag that flash adds):
//   1.05x v3 at D = 64 (219.3 against 209.7 TFLOP/s; causal 1.05x), 1.08x at D = 128 (257.8
//   against 237.8; causal 1.07x).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "08_tensor_core_backward/backward_tiles.cuh"
#include <fragment_gradient.cuh>  // holes/: the hole of exercise ex08
#include "fa/cuda/ptx/cp_async.cuh"
#include "fa/cuda/ptx/ldmatrix.cuh"
#include "fa/cuda/ptx/mma.cuh"
#include "fa/cuda/tc/tile_ops.cuh"

namespace fa::step08::ladder {

using tc::SwizzledTile;
using tc::swizzled_at;  // the ldmatrix address of a step of a swizzled tile

// The tile shape: head dim D, kWarps warps of kKeyBlocks·16 keys each (Bc = 16·kKeyBlocks·kWarps keys
// per block), query tiles of kBr. A warp's Sᵀ and dPᵀ are kKeyBlocks·16 × Br, its dK and dV
// kKeyBlocks·16 × D. This rung runs kKeyBlocks = 1 (16 keys a warp, as v1 .. v4); the row blocks
// are counted already so that v6's step is its shape. In the dQ product (Br queries × D) warp w
// owns kDqBlocks·16 queries from 16·kDqBlocks·(w mod kDqGroups) and the (w / kDqGroups)-th column
// block of D.
template <int D_, int kWarps_, int kMinBlocks_, int kKeyBlocks_ = 1, int kBr_ = 64, int kDqBlocks_ = 1>
struct V5Config {
  static constexpr int D = D_, kWarps = kWarps_, kMinBlocks = kMinBlocks_, kKeyBlocks = kKeyBlocks_;
  static constexpr int kThreads = 32 * kWarps, kBc = 16 * kKeyBlocks * kWarps, kBr = kBr_;
  static constexpr int kDqBlocks = kDqBlocks_;                // 16-query row blocks per warp in dQ
  static constexpr int kDqGroups = kBr / (16 * kDqBlocks);    // warps along the queries of dQ
  static constexpr int kDqCols = D / (kWarps / kDqGroups);    // dQ columns per warp
  static_assert(kBr % 32 == 0 && kBr % (16 * kDqBlocks) == 0 && kWarps % kDqGroups == 0 && kDqCols % 16 == 0,
                "dQ: kDqGroups warps per column block of a multiple of 16");
  using KVTile = SwizzledTile<kBc, D>;
  using QTile = SwizzledTile<kBr, D>;
  using DsTile = SwizzledTile<kBc, kBr>;  // dSᵀ: a row per key, a column per query (Br = 32: padded
                                          // to 64 columns, so that rows stay 128-byte swizzle rows)
  // K, V; two buffers of Q and of dO; dSᵀ; two buffers of the rows' LSE·log2e and D.
  static constexpr int kSmemBytes = (2 * KVTile::kElements + 4 * QTile::kElements + DsTile::kElements) * 2 +
                                    2 * 2 * kBr * 4;
};

template <class T, class C>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks) v5_whole_tiles_kernel(const BackwardArgs<T> a) {
  constexpr int D = C::D, Bc = C::kBc, Br = C::kBr, KM = C::kKeyBlocks;
  constexpr int NQ = Br / 8, DT = D / 8;  // 8-column tiles of Sᵀ (queries) and of dK, dV (D)
  using KVTile = typename C::KVTile;
  using QTile = typename C::QTile;
  extern __shared__ __align__(128) unsigned char smem[];
  // Shared memory by 32-bit shared-window addresses (stage 07): K, V, Q[2], dO[2], dSᵀ, LSE2[2], D[2].
  constexpr std::uint32_t kKV = KVTile::kElements * sizeof(T), kQ = QTile::kElements * sizeof(T);
  constexpr std::uint32_t kDs = C::DsTile::kElements * sizeof(T);
  const std::uint32_t k_tile = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
  const std::uint32_t v_tile = k_tile + kKV, q_tiles = v_tile + kKV, do_tiles = q_tiles + 2 * kQ;
  const std::uint32_t ds_tile = do_tiles + 2 * kQ;
  unsigned char* ds_generic = smem + (ds_tile - k_tile);
  const std::uint32_t rows_tiles = ds_tile + kDs;
  float* rows_s = reinterpret_cast<float*>(smem + (rows_tiles - k_tile));  // [2][2][Br]

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int kw = warp;  // this warp's key block
  // The grid: (heads, key tiles).
  const int key_tile = static_cast<int>(blockIdx.y);
  const std::int64_t head = blockIdx.x;
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

  // dK and dV of this warp's keys (row block mi: keys key0 + 16·mi ..).
  float dv[KM][DT][4] = {}, dk[KM][DT][4] = {};

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

    // Sᵀ = K_w Q_iᵀ and dPᵀ = V_w dO_iᵀ: 16·KM keys × Br queries each, D/16 steps of k = 16.
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
        store(ds_generic, da[mi], mi, ks);
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
    // dSᵀ complete, for every warp. (The __syncthreads at the top of the next tile keeps any warp
    // from overwriting dSᵀ while another reads it.)
    __syncthreads();

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
#pragma unroll
      for (int n = 0; n < DT; ++n) {
        *reinterpret_cast<std::uint32_t*>(a.dk + at_row + 8 * n) =
            ptx::pack2<T>(dk[mi][n][2 * r] * a.scale, dk[mi][n][2 * r + 1] * a.scale);
        *reinterpret_cast<std::uint32_t*>(a.dv + at_row + 8 * n) = ptx::pack2<T>(dv[mi][n][2 * r], dv[mi][n][2 * r + 1]);
      }
    }
}

}  // namespace fa::step08::ladder
