// v1_mma — stage 06's key-tile loop with the five products on the tensor cores, written the first
// way the PTX manual suggests: each thread gathers its fragment registers (fa/cuda/ptx/mma.cuh)
// from plain row-major shared tiles with 32-bit loads (16-bit pairs where k runs down a column), Pᵀ
// and dSᵀ go through shared memory as the A operands of dV and dK, and every copy is synchronous.
//
// What changed from stage 06: fp16/bf16 tiles; Sᵀ = K Qᵀ, dPᵀ = V dOᵀ, dV += Pᵀ dO, dK += dSᵀ Q and
// dQ = dS K as mma.sync.m16n8k16, warp by warp (each of the 8 warps owns 16 of the block's 128
// keys); Pᵀ and dSᵀ on the accumulators (fragment_gradient.cuh). The rungs above change how the
// operands arrive (v2: ldmatrix from swizzled tiles; v3: cp.async) and where Pᵀ and dSᵀ live (v4:
// registers), not this arithmetic.
//
// Predicted (written before the first run): 30-60 TFLOP/s: 8-way bank conflicts on every gather, two 16-bit loads per
//   register for four of the ten operands.
// Measured (H100, bf16, the paper shapes at 4k, the whole backward, docs/results/step08_ladder_*.json):
//   38.6 TFLOP/s at D = 64 (causal 37.6), 44.0 at D = 128 (causal 44.0): a little above stage 06
//   in float32; the tensor cores wait on the gathers.
#pragma once

#include "08_tensor_core_backward/backward_tiles.cuh"
#include <fragment_gradient.cuh>  // holes/: the hole of exercise ex08
#include "fa/cuda/ptx/mma.cuh"
#include "fa/cuda/tc/tile_ops.cuh"

namespace fa::step08::ladder {

using tc::PlainTile;

// Every rung's block: 8 warps of 16 keys (Bc = 128), query tiles of Br = 64, as v4 and the first
// version of the stage's kernel.
inline constexpr int kRungWarps = 8, kRungBc = 128, kRungBr = 64;

template <int D>
struct V1 {
  static constexpr int kThreads = 32 * kRungWarps, kBc = kRungBc, kBr = kRungBr;
  using KVTile = PlainTile<kBc, D>;
  using QTile = PlainTile<kBr, D>;
  using PTile = PlainTile<kBc, kBr>;  // Pᵀ and dSᵀ: a row per key, a column per query
  // K, V; Q, dO; Pᵀ, dSᵀ; the rows' LSE·log2e and D.
  static constexpr int kSmemBytes = (2 * KVTile::kElements + 2 * QTile::kElements + 2 * PTile::kElements) * 2 +
                                    2 * kBr * 4;
};

// The 32-bit register holding X[r][c] and X[r][c + 1] (16-bit elements, row-major, c even).
template <class Tile, class T>
__device__ __forceinline__ std::uint32_t pair_at(const T* tile, int r, int c) {
  return *reinterpret_cast<const std::uint32_t*>(tile + Tile::offset(r, c));
}

// X[r][c] (low half) and X[r + 1][c] (high half): a register whose k runs down a column.
template <class Tile, class T>
__device__ __forceinline__ std::uint32_t column_pair_at(const T* tile, int r, int c) {
  const std::uint16_t lo = *reinterpret_cast<const std::uint16_t*>(tile + Tile::offset(r, c));
  const std::uint16_t hi = *reinterpret_cast<const std::uint16_t*>(tile + Tile::offset(r + 1, c));
  return lo | (static_cast<std::uint32_t>(hi) << 16);
}

template <class T, int D>
__global__ void __launch_bounds__(V1<D>::kThreads) v1_mma_kernel(const BackwardArgs<T> a) {
  using C = V1<D>;
  constexpr int Bc = C::kBc, Br = C::kBr, NQ = Br / 8, DT = D / 8, kThreads = C::kThreads;
  using KVTile = typename C::KVTile;
  using QTile = typename C::QTile;
  using PTile = typename C::PTile;
  extern __shared__ __align__(128) unsigned char smem[];
  T* k_tile = reinterpret_cast<T*>(smem);
  T* v_tile = k_tile + KVTile::kElements;
  T* q_tile = v_tile + KVTile::kElements;
  T* do_tile = q_tile + QTile::kElements;
  T* p_tile = do_tile + QTile::kElements;
  T* ds_tile = p_tile + PTile::kElements;
  float* lse2_s = reinterpret_cast<float*>(ds_tile + PTile::kElements);
  float* delta_s = lse2_s + Br;

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const std::int64_t head = blockIdx.x;
  const int j0 = blockIdx.y * Bc, row0 = 16 * warp, key0 = j0 + row0;  // the warp's first key
  const T* q = a.q + head * a.seq_q * D;
  const T* d_o = a.d_o + head * a.seq_q * D;
  const float* lse2 = a.lse2 + head * a.seq_q_padded;
  const float* delta = a.delta + head * a.seq_q_padded;
  const QueryTiles qt = query_tiles(j0, Bc, Br, a.seq_q, a.seq_k, a.causal);
  // dQ: warp w owns queries 16·(w mod 4) .. +15 of the tile and half of D.
  constexpr int kDqCols = D / 2, QT = kDqCols / 8;
  const int dq_row0 = 16 * (warp % 4), dq_col0 = kDqCols * (warp / 4);

  float dk[DT][4] = {}, dv[DT][4] = {};
  if (qt.begin < qt.end) {
    tc::load_tile<KVTile, Bc, D, kThreads, false>(k_tile, a.k + head * a.seq_k * D, j0, a.seq_k);
    tc::load_tile<KVTile, Bc, D, kThreads, false>(v_tile, a.v + head * a.seq_k * D, j0, a.seq_k);
  }
  const int count = qt.end - qt.begin, first = count > 0 ? static_cast<int>(blockIdx.y) % count : 0;
  for (int n = 0; n < count; ++n) {
    const int i = qt.begin + (first + n) % count;
    __syncthreads();  // every warp is done with the previous tile's Q, dO, Pᵀ, dSᵀ
    tc::load_tile<QTile, Br, D, kThreads, false>(q_tile, q, i * Br, a.seq_q);
    tc::load_tile<QTile, Br, D, kThreads, false>(do_tile, d_o, i * Br, a.seq_q);
    for (int r = threadIdx.x; r < Br; r += kThreads) {  // padded arrays: no bound to check
      lse2_s[r] = lse2[i * Br + r];
      delta_s[r] = delta[i * Br + r];
    }
    __syncthreads();

    // Sᵀ = K_w Q_iᵀ, dPᵀ = V_w dO_iᵀ: A = the warp's 16 rows of K (V); B = Qᵀ (dOᵀ), whose
    // column n is Q's (dO's) row n, so that a B register pairs two neighbours of one row.
    float st[NQ][4] = {}, dpt[NQ][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const int r = row0 + g, c = 16 * kk + 2 * t;
      const std::uint32_t ka[4] = {pair_at<KVTile>(k_tile, r, c), pair_at<KVTile>(k_tile, r + 8, c),
                                   pair_at<KVTile>(k_tile, r, c + 8), pair_at<KVTile>(k_tile, r + 8, c + 8)};
      const std::uint32_t va[4] = {pair_at<KVTile>(v_tile, r, c), pair_at<KVTile>(v_tile, r + 8, c),
                                   pair_at<KVTile>(v_tile, r, c + 8), pair_at<KVTile>(v_tile, r + 8, c + 8)};
#pragma unroll
      for (int nq = 0; nq < NQ; ++nq) {
        ptx::mma_m16n8k16<T>(st[nq], ka, {pair_at<QTile>(q_tile, 8 * nq + g, c), pair_at<QTile>(q_tile, 8 * nq + g, c + 8)});
        ptx::mma_m16n8k16<T>(dpt[nq], va, {pair_at<QTile>(do_tile, 8 * nq + g, c), pair_at<QTile>(do_tile, 8 * nq + g, c + 8)});
      }
    }
    // Pᵀ and dSᵀ on the accumulators: keys key0 + g (+8), queries 8n + 2t (+1) of the tile.
    if (i < qt.unmasked_from) {
#pragma unroll
      for (int nq = 0; nq < NQ; ++nq)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + g + (e >= 2 ? 8 : 0), query = i * Br + 8 * nq + 2 * t + (e & 1);
          if (key >= a.seq_k || (a.causal && key > query + a.seq_k - a.seq_q)) st[nq][e] = -INFINITY;
        }
    }
    probabilities_and_score_gradient<NQ>(st, dpt, lse2_s, delta_s, a.scale_log2);
    // Both to shared memory as 16-bit pairs: Pᵀ for this warp's dV, dSᵀ for its dK and every warp's dQ.
#pragma unroll
    for (int nq = 0; nq < NQ; ++nq)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int at = PTile::offset(row0 + g + 8 * r, 8 * nq + 2 * t);
        *reinterpret_cast<std::uint32_t*>(p_tile + at) = ptx::pack2<T>(st[nq][2 * r], st[nq][2 * r + 1]);
        *reinterpret_cast<std::uint32_t*>(ds_tile + at) = ptx::pack2<T>(dpt[nq][2 * r], dpt[nq][2 * r + 1]);
      }
    __syncthreads();  // Pᵀ, dSᵀ complete

    // dV_w += Pᵀ dO_i, dK_w += dSᵀ Q_i: A = the warp's rows of Pᵀ (dSᵀ), k = queries; B = dO (Q)
    // with k running down its rows: each register pairs two rows of one column.
#pragma unroll
    for (int ks = 0; ks < Br / 16; ++ks) {
      const int r = row0 + g, c = 16 * ks + 2 * t;
      const std::uint32_t pa[4] = {pair_at<PTile>(p_tile, r, c), pair_at<PTile>(p_tile, r + 8, c),
                                   pair_at<PTile>(p_tile, r, c + 8), pair_at<PTile>(p_tile, r + 8, c + 8)};
      const std::uint32_t da[4] = {pair_at<PTile>(ds_tile, r, c), pair_at<PTile>(ds_tile, r + 8, c),
                                   pair_at<PTile>(ds_tile, r, c + 8), pair_at<PTile>(ds_tile, r + 8, c + 8)};
#pragma unroll
      for (int nd = 0; nd < DT; ++nd) {
        ptx::mma_m16n8k16<T>(dv[nd], pa, {column_pair_at<QTile>(do_tile, c, 8 * nd + g),
                                          column_pair_at<QTile>(do_tile, c + 8, 8 * nd + g)});
        ptx::mma_m16n8k16<T>(dk[nd], da, {column_pair_at<QTile>(q_tile, c, 8 * nd + g),
                                          column_pair_at<QTile>(q_tile, c + 8, 8 * nd + g)});
      }
    }

    // dQ_i (this warp's 16 queries × D/2) = dS K_j: A = dS, the transpose of the stored dSᵀ, so a
    // register pairs two keys (two rows of dSᵀ) of one query; B = K with k running down its rows.
    float dq[QT][4] = {};
#pragma unroll
    for (int ks = 0; ks < Bc / 16; ++ks) {
      const int kr = 16 * ks + 2 * t, qc = dq_row0 + g;
      const std::uint32_t sa[4] = {column_pair_at<PTile>(ds_tile, kr, qc), column_pair_at<PTile>(ds_tile, kr, qc + 8),
                                   column_pair_at<PTile>(ds_tile, kr + 8, qc),
                                   column_pair_at<PTile>(ds_tile, kr + 8, qc + 8)};
#pragma unroll
      for (int nd = 0; nd < QT; ++nd)
        ptx::mma_m16n8k16<T>(dq[nd], sa, {column_pair_at<KVTile>(k_tile, kr, dq_col0 + 8 * nd + g),
                                          column_pair_at<KVTile>(k_tile, kr + 8, dq_col0 + 8 * nd + g)});
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int query = i * Br + dq_row0 + g + 8 * r;
      if (query >= a.seq_q) continue;
      float* row = a.dq_accum + (head * a.seq_q + query) * D + dq_col0 + 2 * t;
#pragma unroll
      for (int nd = 0; nd < QT; ++nd) add_to_dq(row + 8 * nd, dq[nd][2 * r], dq[nd][2 * r + 1]);
    }
  }

  // dK = τ·dSᵀQ and dV, this warp's 16 keys (rows ≥ Nk are not written).
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key0 + g + 8 * r;
    if (key >= a.seq_k) continue;
    const std::int64_t at_row = (head * a.seq_k + key) * D + 2 * t;
#pragma unroll
    for (int nd = 0; nd < DT; ++nd) {
      *reinterpret_cast<std::uint32_t*>(a.dk + at_row + 8 * nd) =
          ptx::pack2<T>(dk[nd][2 * r] * a.scale, dk[nd][2 * r + 1] * a.scale);
      *reinterpret_cast<std::uint32_t*>(a.dv + at_row + 8 * nd) = ptx::pack2<T>(dv[nd][2 * r], dv[nd][2 * r + 1]);
    }
  }
}

}  // namespace fa::step08::ladder
