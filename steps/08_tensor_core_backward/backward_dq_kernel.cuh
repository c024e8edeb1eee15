// backward_dq_kernel.cuh — stage 08's deterministic dQ (--deterministic): a second kernel over
// query tiles, after the key-tile kernel ran without its dQ part (backward_tc_kernel<T, C, false>).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "08_tensor_core_backward/backward_tiles.cuh"
#include "fa/cuda/ptx/cp_async.cuh"
#include "fa/cuda/ptx/ldmatrix.cuh"
#include "fa/cuda/ptx/mma.cuh"
#include "fa/cuda/tc/tile_ops.cuh"

namespace fa::step08 {

using tc::SwizzledTile;
using tc::swizzled_at;

// The deterministic dQ: one block per query tile of 16·kWarps queries, each warp owning 16 of
// them (stage 07's forward loop, with the backward's arithmetic), the key tiles streamed. Per key
// tile j, on accumulator fragments, S and dP are recomputed once more:
//   S = Q_w K_jᵀ, dP = dO_w V_jᵀ      A: Q, dO rows (ldmatrix); B: K, V rows as columns (ldmatrix)
//   P = 2^(S·τlog2e − LSE·log2e), dS = P ∘ (dP − D)
//   dQ_w += dS K_j                     A: dS packed in registers (the C→A identity); B: K (.trans)
// dQ is summed in registers in one fixed order and written once: bitwise the same on every run, no
// float32 buffer, at the price of computing S and dP twice (in this kernel and the key-tile one).
template <int D_, int kWarps_, int kBc_, int kMinBlocks_>
struct DqConfig {
  static constexpr int D = D_, kWarps = kWarps_, kBc = kBc_, kMinBlocks = kMinBlocks_;
  static constexpr int kThreads = 32 * kWarps, kBr = 16 * kWarps;
  using QTile = SwizzledTile<kBr, D>;
  using KVTile = SwizzledTile<kBc, D>;
  // Q, dO; two buffers of K and of V.
  static constexpr int kSmemBytes = (2 * QTile::kElements + 4 * KVTile::kElements) * 2;
};

template <class T, class C>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks) backward_dq_kernel(const BackwardArgs<T> a, T* dq_out) {
  constexpr int D = C::D, Br = C::kBr, Bc = C::kBc, NT = Bc / 8, DT = D / 8;
  using QTile = typename C::QTile;
  using KVTile = typename C::KVTile;
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr std::uint32_t kQ = QTile::kElements * sizeof(T), kKV = KVTile::kElements * sizeof(T);
  const std::uint32_t q_tile = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
  const std::uint32_t do_tile = q_tile + kQ, k_tiles = do_tile + kQ, v_tiles = k_tiles + 2 * kKV;

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const std::int64_t head = blockIdx.x;
  const int i0 = blockIdx.y * Br, row0 = i0 + 16 * warp;
  const T* q = a.q + head * a.seq_q * D;
  const T* d_o = a.d_o + head * a.seq_q * D;
  const T* k = a.k + head * a.seq_k * D;
  const T* v = a.v + head * a.seq_k * D;
  const tc::KeyTiles kv = tc::key_tiles(i0, Br, Bc, a.seq_q, a.seq_k, a.causal);

  // The rows' LSE·log2e and D (padded arrays: every row < seq_q_padded exists).
  float l2[2], dd[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l2[r] = a.lse2[head * a.seq_q_padded + row0 + g + 8 * r];
    dd[r] = a.delta[head * a.seq_q_padded + row0 + g + 8 * r];
  }
  // ldmatrix patterns as in the key-tile kernel: "A" (Q, dO rows; K .trans), "B" (K, V rows as columns).
  const int chunk_a = (lane / 16) ^ (lane % 8), chunk_b = (lane / 8 % 2) ^ (lane % 8);
  const int row_a = lane % 16, row_b = lane % 8 + 8 * (lane / 16);
  const std::uint32_t q_as_a = q_tile + sizeof(T) * ((16 * warp + row_a) * 64 + chunk_a * 8);
  const std::uint32_t do_as_a = do_tile + sizeof(T) * ((16 * warp + row_a) * 64 + chunk_a * 8);
  const std::uint32_t kv_as_b = sizeof(T) * (row_b * 64 + chunk_b * 8);   // + the tile
  const std::uint32_t k_as_bt = sizeof(T) * (row_a * 64 + chunk_a * 8);   // + the tile

  float dq[DT][4] = {};
  if (kv.count > 0) {
    tc::load_tile_async<QTile, Br, D, C::kThreads>(q_tile, q, i0, a.seq_q);
    tc::load_tile_async<QTile, Br, D, C::kThreads>(do_tile, d_o, i0, a.seq_q);
    tc::load_tile_async<KVTile, Bc, D, C::kThreads>(k_tiles, k, 0, a.seq_k);
    tc::load_tile_async<KVTile, Bc, D, C::kThreads>(v_tiles, v, 0, a.seq_k);
  }
  ptx::cp_async_commit();
  for (int j = 0; j < kv.count; ++j) {
    const std::uint32_t buffer = (j & 1) * kKV, k_tile = k_tiles + buffer, v_tile = v_tiles + buffer;
    ptx::cp_async_wait<0>();
    __syncthreads();  // K_j, V_j (and Q, dO) landed; every warp done with tile j − 1's buffers
    if (j + 1 < kv.count) {
      tc::load_tile_async<KVTile, Bc, D, C::kThreads>(k_tiles + kKV - buffer, k, (j + 1) * Bc, a.seq_k);
      tc::load_tile_async<KVTile, Bc, D, C::kThreads>(v_tiles + kKV - buffer, v, (j + 1) * Bc, a.seq_k);
    }
    ptx::cp_async_commit();

    float s[NT][4] = {}, dp[NT][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      std::uint32_t qa[4], oa[4];
      ptx::ldmatrix_x4(qa, swizzled_at<T>(q_as_a, kk, 0, Br));
      ptx::ldmatrix_x4(oa, swizzled_at<T>(do_as_a, kk, 0, Br));
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        std::uint32_t kb[4], vb[4];
        ptx::ldmatrix_x4(kb, swizzled_at<T>(k_tile + kv_as_b, kk, np, Bc));
        ptx::ldmatrix_x4(vb, swizzled_at<T>(v_tile + kv_as_b, kk, np, Bc));
        ptx::mma_m16n8k16<T>(s[2 * np], qa, {kb[0], kb[1]});
        ptx::mma_m16n8k16<T>(s[2 * np + 1], qa, {kb[2], kb[3]});
        ptx::mma_m16n8k16<T>(dp[2 * np], oa, {vb[0], vb[1]});
        ptx::mma_m16n8k16<T>(dp[2 * np + 1], oa, {vb[2], vb[3]});
      }
    }
    // P and dS; this thread holds rows row0 + g (e < 2), row0 + g + 8 and keys 8n + 2t (+1).
    const bool masked = j >= kv.mask_from;
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[n][e];
        if (masked) {
          const int key = j * Bc + 8 * n + 2 * t + (e & 1), query = row0 + g + (e >= 2 ? 8 : 0);
          if (key >= a.seq_k || (a.causal && key > query + a.seq_k - a.seq_q)) x = -INFINITY;
        }
        const float p = ptx::ex2(fmaf(x, a.scale_log2, -l2[e / 2]));
        s[n][e] = p * (dp[n][e] - dd[e / 2]);  // dS, in S's registers
      }
    // dQ_w += dS K_j: Bc/16 steps of k = 16 keys.
#pragma unroll
    for (int ks = 0; ks < Bc / 16; ++ks) {
      const std::uint32_t sa[4] = {ptx::pack2<T>(s[2 * ks][0], s[2 * ks][1]), ptx::pack2<T>(s[2 * ks][2], s[2 * ks][3]),
                                   ptx::pack2<T>(s[2 * ks + 1][0], s[2 * ks + 1][1]),
                                   ptx::pack2<T>(s[2 * ks + 1][2], s[2 * ks + 1][3])};
#pragma unroll
      for (int d16 = 0; d16 < D / 16; ++d16) {
        std::uint32_t kb[4];
        ptx::ldmatrix_x4_trans(kb, swizzled_at<T>(k_tile + k_as_bt, d16, ks, Bc));
        ptx::mma_m16n8k16<T>(dq[2 * d16], sa, {kb[0], kb[1]});
        ptx::mma_m16n8k16<T>(dq[2 * d16 + 1], sa, {kb[2], kb[3]});
      }
    }
  }
  // dQ = τ·dS K, this warp's rows (≥ Nq not written; a row that sees no key writes zeros).
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int query = row0 + g + 8 * r;
    if (query >= a.seq_q) continue;
#pragma unroll
    for (int n = 0; n < DT; ++n)
      *reinterpret_cast<std::uint32_t*>(dq_out + (head * a.seq_q + query) * D + 8 * n + 2 * t) =
          ptx::pack2<T>(dq[n][2 * r] * a.scale, dq[n][2 * r + 1] * a.scale);
  }
}

}  // namespace fa::step08
