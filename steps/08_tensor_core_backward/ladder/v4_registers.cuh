// v4_registers — v3 with Pᵀ and dSᵀ kept in the accumulator registers where they are born, as the
// A operands of dV += Pᵀ dO and dK += dSᵀ Q (the accumulator → operand identity of stage 07's v4):
// two 8-query accumulator tiles, packed to 16 bits, are one A fragment. Only dSᵀ still goes to
// shared memory, for the product that sums over keys, dQ = dS K, whose rows other warps own.
//
// What changed from v3 (diff ladder/v3_cp_async.cuh against this file): Pᵀ's shared tile, its
// store and reload are gone; dSᵀ is stored from the packed fragments as they are made, inside the
// dV/dK loop; so the __syncthreads that waited for Pᵀ and dSᵀ before dV and dK moves after them,
// where only dQ needs it. The addresses, the copies and the tile shape are v3's.
//
// Shape: 8 warps of 16 keys (Bc = 128), query tiles of 64, grid (heads, key tiles), D = 64 and 128:
// v1 .. v3's. Registers at D = 128 (ptxas, sm_90): 255 and 12 bytes spilled, where v3 spills 24 and
// v5 4 (its 32-bit addresses free the rest); none at D = 64.
// Predicted (written before this rung was measured): v3 → v5 was measured as one step, named
//   v4_registers in docs/results/step08_ladder_*.json: 1.05x v3 at D = 64, 1.08x at D = 128.
//   Less v5's share (v5_whole_tiles.cuh: 1.00-1.03x), this step keeps 1.02-1.05x at D = 64 and
//   1.05-1.08x at D = 128: once v3 hid the copies the kernel waits on the Q/dO fragment reads,
//   which this rung does not reduce (v6 does).
// Measured (one H200, every rung verified in one run, N = 4096, not causal,
//   docs/results/step08_ladder_split_h200/step08_ladder_d64.json and _d128.json): 1.09x v3 at
//   D = 64 (227.4 TFLOP/s), 1.08x at D = 128 (257.3): above the prediction at D = 64, at its top at
//   D = 128. In that run this rung is the whole of v3 → v5 (v5 adds 1.00x and 0.99x); the
//   prediction left it too little, as if v5's restyle had a share of the gain.
#pragma once

#include "08_tensor_core_backward/ladder/v2_ldmatrix.cuh"
#include "fa/cuda/ptx/cp_async.cuh"
#include "fa/cuda/ptx/ldmatrix.cuh"

namespace fa::step08::ladder {

template <int D>
struct V4 {
  static constexpr int kThreads = 32 * kRungWarps, kBc = kRungBc, kBr = kRungBr;
  using KVTile = SwizzledTile<kBc, D>;
  using QTile = SwizzledTile<kBr, D>;
  using DsTile = SwizzledTile<kBc, kBr>;  // dSᵀ: a row per key, a column per query
  // K, V; two buffers of Q and of dO; dSᵀ; two buffers of the rows' LSE·log2e and D.
  static constexpr int kSmemBytes = (2 * KVTile::kElements + 4 * QTile::kElements + DsTile::kElements) * 2 +
                                    2 * 2 * kBr * 4;
};

template <class T, int D>
__global__ void __launch_bounds__(V4<D>::kThreads) v4_registers_kernel(const BackwardArgs<T> a) {
  using C = V4<D>;
  constexpr int Bc = C::kBc, Br = C::kBr, NQ = Br / 8, DT = D / 8, kThreads = C::kThreads;
  using KVTile = typename C::KVTile;
  using QTile = typename C::QTile;
  using DsTile = typename C::DsTile;
  extern __shared__ __align__(128) unsigned char smem[];
  T* k_tile = reinterpret_cast<T*>(smem);
  T* v_tile = k_tile + KVTile::kElements;
  T* q_tiles = v_tile + KVTile::kElements;  // [2]
  T* do_tiles = q_tiles + 2 * QTile::kElements;
  T* ds_tile = do_tiles + 2 * QTile::kElements;
  float* rows_s = reinterpret_cast<float*>(ds_tile + DsTile::kElements);  // [2][LSE·log2e, D][Br]
  constexpr std::uint32_t kQ = QTile::kElements * sizeof(T);  // a buffer's bytes
  const auto shared = [](const T* tile) { return static_cast<std::uint32_t>(__cvta_generic_to_shared(tile)); };

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const std::int64_t head = blockIdx.x;
  const int j0 = blockIdx.y * Bc, row0 = 16 * warp, key0 = j0 + row0;
  const T* q = a.q + head * a.seq_q * D;
  const T* d_o = a.d_o + head * a.seq_q * D;
  const float* lse2 = a.lse2 + head * a.seq_q_padded;
  const float* delta = a.delta + head * a.seq_q_padded;
  const QueryTiles qt = query_tiles(j0, Bc, Br, a.seq_q, a.seq_k, a.causal);
  constexpr int kDqCols = D / 2, QT = kDqCols / 8;
  const int dq_row0 = 16 * (warp % 4), dq_col0 = kDqCols * (warp / 4);

  // The lane's addresses: K, V rows of this warp as A; Q, dO as B (Sᵀ, dPᵀ) and as .trans B (dV,
  // dK); K as .trans B (dQ); dSᵀ read .trans as dS's A operand (dQ): queries are its columns.
  const std::uint32_t key_rows_a = pattern_a<T>(row0);
  const std::uint32_t k_as_a = shared(k_tile) + key_rows_a, v_as_a = shared(v_tile) + key_rows_a;
  const std::uint32_t q_as_b = shared(q_tiles) + pattern_b<T>(0), do_as_b = shared(do_tiles) + pattern_b<T>(0);
  const std::uint32_t q_as_bt = shared(q_tiles) + pattern_a<T>(0), do_as_bt = shared(do_tiles) + pattern_a<T>(0);
  const std::uint32_t k_as_bt = shared(k_tile) + pattern_a<T>(0);
  const int ds_chunk = dq_row0 / 8 + lane / 8 % 2;  // dS's A operand: the query chunk of this lane
  const std::uint32_t ds_as_a =
      shared(ds_tile) + sizeof(T) * ((lane % 8 + 8 * (lane / 16)) * 64 + ((ds_chunk ^ (lane % 8)) * 8));

  float dk[DT][4] = {}, dv[DT][4] = {};
  if (qt.begin < qt.end) {
    tc::load_tile<KVTile, Bc, D, kThreads, false>(k_tile, a.k + head * a.seq_k * D, j0, a.seq_k);
    tc::load_tile<KVTile, Bc, D, kThreads, false>(v_tile, a.v + head * a.seq_k * D, j0, a.seq_k);
  }
  // Q_i, dO_i and the rows' LSE·log2e and D of query tile i into buffer b, by cp.async.
  auto load_query_tile = [&](int i, int b) {
    tc::load_tile<QTile, Br, D, kThreads, true>(q_tiles + b * QTile::kElements, q, i * Br, a.seq_q);
    tc::load_tile<QTile, Br, D, kThreads, true>(do_tiles + b * QTile::kElements, d_o, i * Br, a.seq_q);
    for (int c = threadIdx.x; c < Br / 2; c += kThreads) {  // 16-byte chunks of the padded arrays
      const float* from = c < Br / 4 ? lse2 + i * Br + 4 * c : delta + i * Br + 4 * (c - Br / 4);
      ptx::cp_async16(rows_s + b * 2 * Br + 4 * c, from, true);
    }
  };
  const int count = qt.end - qt.begin, first = count > 0 ? static_cast<int>(blockIdx.y) % count : 0;
  auto tile_at = [&](int n) { return qt.begin + (first + n) % count; };
  if (count > 0) load_query_tile(tile_at(0), 0);
  ptx::cp_async_commit();
  for (int n = 0; n < count; ++n) {
    const int i = tile_at(n), b = n & 1;
    ptx::cp_async_wait<0>();  // this tile's Q, dO, LSE, D have landed ...
    __syncthreads();          // ... for every thread; and every warp is done with the tile before
    if (n + 1 < count) load_query_tile(tile_at(n + 1), b ^ 1);
    ptx::cp_async_commit();
    const std::uint32_t buffer = b * kQ;
    const float* lse2_s = rows_s + b * 2 * Br;
    const float* delta_s = lse2_s + Br;

    // Sᵀ = K_w Q_iᵀ, dPᵀ = V_w dO_iᵀ.
    float st[NQ][4] = {}, dpt[NQ][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      std::uint32_t ka[4], va[4];
      ptx::ldmatrix_x4(ka, swizzled_at<T>(k_as_a, kk, 0, Bc));
      ptx::ldmatrix_x4(va, swizzled_at<T>(v_as_a, kk, 0, Bc));
#pragma unroll
      for (int np = 0; np < NQ / 2; ++np) {
        std::uint32_t qb[4], db[4];
        ptx::ldmatrix_x4(qb, swizzled_at<T>(q_as_b + buffer, kk, np, Br));
        ptx::ldmatrix_x4(db, swizzled_at<T>(do_as_b + buffer, kk, np, Br));
        ptx::mma_m16n8k16<T>(st[2 * np], ka, {qb[0], qb[1]});
        ptx::mma_m16n8k16<T>(st[2 * np + 1], ka, {qb[2], qb[3]});
        ptx::mma_m16n8k16<T>(dpt[2 * np], va, {db[0], db[1]});
        ptx::mma_m16n8k16<T>(dpt[2 * np + 1], va, {db[2], db[3]});
      }
    }
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

    // dV_w += Pᵀ dO_i, dK_w += dSᵀ Q_i, with Pᵀ and dSᵀ as A operands straight from the accumulators
    // (the 8-query tiles 2·ks and 2·ks + 1, packed); dSᵀ also goes to shared memory, for dQ.
#pragma unroll
    for (int ks = 0; ks < Br / 16; ++ks) {
      const std::uint32_t pa[4] = {ptx::pack2<T>(st[2 * ks][0], st[2 * ks][1]),
                                   ptx::pack2<T>(st[2 * ks][2], st[2 * ks][3]),
                                   ptx::pack2<T>(st[2 * ks + 1][0], st[2 * ks + 1][1]),
                                   ptx::pack2<T>(st[2 * ks + 1][2], st[2 * ks + 1][3])};
      const std::uint32_t da[4] = {ptx::pack2<T>(dpt[2 * ks][0], dpt[2 * ks][1]),
                                   ptx::pack2<T>(dpt[2 * ks][2], dpt[2 * ks][3]),
                                   ptx::pack2<T>(dpt[2 * ks + 1][0], dpt[2 * ks + 1][1]),
                                   ptx::pack2<T>(dpt[2 * ks + 1][2], dpt[2 * ks + 1][3])};
#pragma unroll
      for (int half = 0; half < 2; ++half)  // da[2·half + r]: key row g + 8r, queries 16·ks + 8·half + 2t
#pragma unroll
        for (int r = 0; r < 2; ++r)
          *reinterpret_cast<std::uint32_t*>(ds_tile + DsTile::offset(row0 + g + 8 * r, 16 * ks + 8 * half) + 2 * t) =
              da[2 * half + r];
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        std::uint32_t ob[4], qb[4];
        ptx::ldmatrix_x4_trans(ob, swizzled_at<T>(do_as_bt + buffer, dp, ks, Br));
        ptx::ldmatrix_x4_trans(qb, swizzled_at<T>(q_as_bt + buffer, dp, ks, Br));
        ptx::mma_m16n8k16<T>(dv[2 * dp], pa, {ob[0], ob[1]});
        ptx::mma_m16n8k16<T>(dv[2 * dp + 1], pa, {ob[2], ob[3]});
        ptx::mma_m16n8k16<T>(dk[2 * dp], da, {qb[0], qb[1]});
        ptx::mma_m16n8k16<T>(dk[2 * dp + 1], da, {qb[2], qb[3]});
      }
    }

    __syncthreads();  // dSᵀ complete, for every warp

    // dQ_i (this warp's 16 queries × D/2) = dS K_j.
    float dq[QT][4] = {};
#pragma unroll
    for (int ks = 0; ks < Bc / 16; ++ks) {
      std::uint32_t sa[4];
      ptx::ldmatrix_x4_trans(sa, ds_as_a + sizeof(T) * (16 * ks * 64));
#pragma unroll
      for (int dp = 0; dp < QT / 2; ++dp) {
        std::uint32_t kb[4];
        ptx::ldmatrix_x4_trans(kb, swizzled_at<T>(k_as_bt, dq_col0 / 16 + dp, ks, Bc));
        ptx::mma_m16n8k16<T>(dq[2 * dp], sa, {kb[0], kb[1]});
        ptx::mma_m16n8k16<T>(dq[2 * dp + 1], sa, {kb[2], kb[3]});
      }
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
