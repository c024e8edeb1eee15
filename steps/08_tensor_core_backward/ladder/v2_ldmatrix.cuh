// v2_ldmatrix — v1 with every operand fetched by ldmatrix(.trans) from XOR-swizzled tiles (stage
// 07's SwizzledTile and addresses): one instruction per 16 × 16 fragment, and no bank conflicts.
//
// What changed from v1 (diff ladder/v1_mma.cuh against this file): the tiles' layout and the
// fragment loads. Each lane keeps one shared-memory address per operand pattern and steps through
// k by an XOR (fa/cuda/tc/tile_ops.cuh, swizzled_at); the operands that v1 gathered in 16-bit
// pairs down a column (dO and Q for dV and dK, dSᵀ and K for dQ) come transposed by ldmatrix.trans.
// The copies, the arithmetic and the trips of Pᵀ and dSᵀ through shared memory are v1's.
//
// Predicted (written before the first run): 3-5x v1 (stage 07's v1 -> v2: 4.2-4.5x).
// Measured (H100, bf16, the paper shapes at 4k, the whole backward, docs/results/step08_ladder_*.json):
//   3.54x v1 at D = 64 (136.7 TFLOP/s; causal 3.48x), 3.91x at D = 128 (172.1; causal 3.75x).
#pragma once

#include "08_tensor_core_backward/ladder/v1_mma.cuh"
#include "fa/cuda/ptx/ldmatrix.cuh"

namespace fa::step08::ladder {

using tc::SwizzledTile;
using tc::swizzled_at;  // the ldmatrix address of a step of a swizzled tile

template <int D>
struct V2 {
  static constexpr int kThreads = 32 * kRungWarps, kBc = kRungBc, kBr = kRungBr;
  using KVTile = SwizzledTile<kBc, D>;
  using QTile = SwizzledTile<kBr, D>;
  using PTile = SwizzledTile<kBc, kBr>;  // Pᵀ and dSᵀ: a row per key, a column per query
  static constexpr int kSmemBytes = (2 * KVTile::kElements + 2 * QTile::kElements + 2 * PTile::kElements) * 2 +
                                    2 * kBr * 4;
};

// The ldmatrix row addresses of one lane (the stage's kernel explains the two patterns): "A" for an
// operand stored row-major or a .trans B whose k runs along the stored rows, "B" for a B operand
// whose n runs along the stored rows. Returns the byte offset within a tile of 64-column blocks.
template <class T>
__device__ __forceinline__ std::uint32_t pattern_a(int row0) {
  const int lane = threadIdx.x % 32;
  return sizeof(T) * ((row0 + lane % 16) * 64 + ((lane / 16) ^ (lane % 8)) * 8);
}
template <class T>
__device__ __forceinline__ std::uint32_t pattern_b(int row0) {
  const int lane = threadIdx.x % 32;
  return sizeof(T) * ((row0 + lane % 8 + 8 * (lane / 16)) * 64 + ((lane / 8 % 2) ^ (lane % 8)) * 8);
}

template <class T, int D>
__global__ void __launch_bounds__(V2<D>::kThreads) v2_ldmatrix_kernel(const BackwardArgs<T> a) {
  using C = V2<D>;
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

  // The lane's addresses: K, V, Pᵀ, dSᵀ rows of this warp as A; Q, dO as B (Sᵀ, dPᵀ) and as .trans
  // B (dV, dK); K as .trans B (dQ); dSᵀ read .trans as dS's A operand (dQ): queries are its columns.
  const std::uint32_t key_rows_a = pattern_a<T>(row0);
  const std::uint32_t k_as_a = shared(k_tile) + key_rows_a, v_as_a = shared(v_tile) + key_rows_a;
  const std::uint32_t p_as_a = shared(p_tile) + key_rows_a, ds_as_a_keys = shared(ds_tile) + key_rows_a;
  const std::uint32_t q_as_b = shared(q_tile) + pattern_b<T>(0), do_as_b = shared(do_tile) + pattern_b<T>(0);
  const std::uint32_t q_as_bt = shared(q_tile) + pattern_a<T>(0), do_as_bt = shared(do_tile) + pattern_a<T>(0);
  const std::uint32_t k_as_bt = shared(k_tile) + pattern_a<T>(0);
  const int ds_chunk = dq_row0 / 8 + lane / 8 % 2;  // dS's A operand: the query chunk of this lane
  const std::uint32_t ds_as_a =
      shared(ds_tile) + sizeof(T) * ((lane % 8 + 8 * (lane / 16)) * 64 + ((ds_chunk ^ (lane % 8)) * 8));

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
    for (int r = threadIdx.x; r < Br; r += kThreads) {
      lse2_s[r] = lse2[i * Br + r];
      delta_s[r] = delta[i * Br + r];
    }
    __syncthreads();

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
        ptx::ldmatrix_x4(qb, swizzled_at<T>(q_as_b, kk, np, Br));
        ptx::ldmatrix_x4(db, swizzled_at<T>(do_as_b, kk, np, Br));
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
#pragma unroll
    for (int nq = 0; nq < NQ; ++nq)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int at = PTile::offset(row0 + g + 8 * r, 8 * nq) + 2 * t;
        *reinterpret_cast<std::uint32_t*>(p_tile + at) = ptx::pack2<T>(st[nq][2 * r], st[nq][2 * r + 1]);
        *reinterpret_cast<std::uint32_t*>(ds_tile + at) = ptx::pack2<T>(dpt[nq][2 * r], dpt[nq][2 * r + 1]);
      }
    __syncthreads();  // Pᵀ, dSᵀ complete

    // dV_w += Pᵀ dO_i, dK_w += dSᵀ Q_i.
#pragma unroll
    for (int ks = 0; ks < Br / 16; ++ks) {
      std::uint32_t pa[4], da[4];
      ptx::ldmatrix_x4(pa, swizzled_at<T>(p_as_a, ks, 0, Bc));
      ptx::ldmatrix_x4(da, swizzled_at<T>(ds_as_a_keys, ks, 0, Bc));
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        std::uint32_t ob[4], qb[4];
        ptx::ldmatrix_x4_trans(ob, swizzled_at<T>(do_as_bt, dp, ks, Br));
        ptx::ldmatrix_x4_trans(qb, swizzled_at<T>(q_as_bt, dp, ks, Br));
        ptx::mma_m16n8k16<T>(dv[2 * dp], pa, {ob[0], ob[1]});
        ptx::mma_m16n8k16<T>(dv[2 * dp + 1], pa, {ob[2], ob[3]});
        ptx::mma_m16n8k16<T>(dk[2 * dp], da, {qb[0], qb[1]});
        ptx::mma_m16n8k16<T>(dk[2 * dp + 1], da, {qb[2], qb[3]});
      }
    }

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
