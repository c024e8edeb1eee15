// v4_registers — v3 with P kept in the accumulator registers as the A operand of P·V (the
// accumulator → operand identity: two 16 × 8 C fragments of S, packed to 16 bits, are exactly one
// 16 × 16 A fragment), so P's store, reload and __syncwarp through shared memory are gone.
//
// What changed from v3 (diff ladder/v3_cp_async.cuh against this file): P's shared tile (its
// store, the __syncwarp and the ldmatrix that read it back) became four pack2 per 16 keys; the
// addresses, the copies and their order are v3's.
//
// Predicted (written before this rung was measured): v3 → v5 was one step until it was split here
//   (measured as "v4_registers", docs/results/step07_ladder_d64.json and _d128.json: 1.30x v3 at
//   D = 64, 1.07x at D = 128); less the part v5_addresses.cuh predicts for the address changes
//   (0.97-1.07x at D = 64, 1.06-1.18x at D = 128), this step keeps 1.21-1.34x v3 at D = 64 and
//   0.91-1.01x at D = 128. P's round trip is the same 2 KiB per warp per tile at either D, a
//   smaller share of twice the arithmetic at D = 128.
// Measured (one H200, every rung verified in one run, N = 4096, not causal,
//   docs/results/step07_ladder_split_h200/step07_ladder_d64.json and _d128.json): 1.03x v3 at
//   D = 64 (238 TFLOP/s), 1.07x at D = 128 (286). The prediction was wrong at both head dims: P's
//   round trip was worth little at D = 64 and the whole of v3 → v5 at D = 128, so the step splits
//   between this rung and v5 the other way round from the prediction (v5_addresses.cuh).
#pragma once

#include "fa/cuda/tc/fragment_softmax.cuh"
#include "fa/cuda/tc/tile_ops.cuh"
#include "fa/cuda/ptx/cp_async.cuh"
#include "fa/cuda/ptx/ldmatrix.cuh"
#include "fa/cuda/ptx/mma.cuh"

namespace fa::step07::ladder {
using namespace fa::tc;  // the tile and fragment building blocks (common/cuda/include/fa/cuda/tc/)

template <int D>
struct V4 {
  static constexpr int kThreads = 128, kBr = 64, kBc = 64;
  using QTile = SwizzledTile<kBr, D>;
  using KVTile = SwizzledTile<kBc, D>;
  static constexpr int kSmemBytes = (QTile::kElements + 4 * KVTile::kElements) * 2;
};

template <class T, int D>
__global__ void __launch_bounds__(128) v4_registers_kernel(const KernelArgs<T> a) {
  constexpr int Br = V4<D>::kBr, Bc = V4<D>::kBc, NT = Bc / 8, DT = D / 8;
  using QTile = typename V4<D>::QTile;
  using KVTile = typename V4<D>::KVTile;
  extern __shared__ __align__(128) unsigned char smem[];
  T* q_tile = reinterpret_cast<T*>(smem);
  T* k_tiles = q_tile + QTile::kElements;        // [2][KVTile]
  T* v_tiles = k_tiles + 2 * KVTile::kElements;  // [2][KVTile]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

  const int tile = a.heavy_first ? gridDim.y - 1 - blockIdx.y : blockIdx.y;
  const int i0 = tile * Br, warp_row0 = 16 * warp;
  const std::int64_t head = blockIdx.x;
  const T* q = a.q + head * a.seq_q * D;
  const T* k = a.k + head * a.seq_k * D;
  const T* v = a.v + head * a.seq_k * D;
  const KeyTiles kv = key_tiles(i0, Br, Bc, a.seq_q, a.seq_k, a.causal);

  float o[1][DT][4] = {};
  float m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {};
  if (kv.count > 0) {
    load_tile<QTile, Br, D, 128, true>(q_tile, q, i0, a.seq_q);
    load_tile<KVTile, Bc, D, 128, true>(k_tiles, k, 0, a.seq_k);
    ptx::cp_async_commit();  // group: Q, K_0
    load_tile<KVTile, Bc, D, 128, true>(v_tiles, v, 0, a.seq_k);
    ptx::cp_async_commit();  // group: V_0
  }

  for (int j = 0; j < kv.count; ++j) {
    const T* k_tile = k_tiles + (j & 1) * KVTile::kElements;
    const T* v_tile = v_tiles + (j & 1) * KVTile::kElements;
    ptx::cp_async_wait<1>();  // Q and K_j have landed (V_j may still be in flight)
    __syncthreads();

    float s[1][NT][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      std::uint32_t qa[4];
      ptx::ldmatrix_x4(qa, q_tile + QTile::offset(warp_row0 + lane % 16, 16 * kk + 8 * (lane / 16)));
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        std::uint32_t kb[4];
        ptx::ldmatrix_x4(kb, k_tile + KVTile::offset(16 * np + lane % 8 + 8 * (lane / 16), 16 * kk + 8 * (lane / 8 % 2)));
        ptx::mma_m16n8k16<T>(s[0][2 * np], qa, {kb[0], kb[1]});
        ptx::mma_m16n8k16<T>(s[0][2 * np + 1], qa, {kb[2], kb[3]});
      }
    }
    if (j >= kv.mask_from) mask_scores(s, i0 + warp_row0, j * Bc, a.seq_q, a.seq_k, a.causal);
    float alpha[2];
    online_softmax(s[0], m[0], l[0], alpha, a.scale_log2);
    rescale(o[0], alpha);

    if (j + 1 < kv.count)
      load_tile<KVTile, Bc, D, 128, true>(k_tiles + ((j + 1) & 1) * KVTile::kElements, k, (j + 1) * Bc, a.seq_k);
    ptx::cp_async_commit();
    ptx::cp_async_wait<1>();  // V_j has landed (K_{j+1} may still be in flight)
    __syncthreads();

#pragma unroll
    for (int ks = 0; ks < Bc / 16; ++ks) {
      // P's A fragment for keys 16·ks .. +15: S's column tiles 2·ks and 2·ks + 1, packed.
      const std::uint32_t pa[4] = {ptx::pack2<T>(s[0][2 * ks][0], s[0][2 * ks][1]),
                                   ptx::pack2<T>(s[0][2 * ks][2], s[0][2 * ks][3]),
                                   ptx::pack2<T>(s[0][2 * ks + 1][0], s[0][2 * ks + 1][1]),
                                   ptx::pack2<T>(s[0][2 * ks + 1][2], s[0][2 * ks + 1][3])};
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        std::uint32_t vb[4];
        ptx::ldmatrix_x4_trans(vb, v_tile + KVTile::offset(16 * ks + lane % 16, 16 * dp + 8 * (lane / 16)));
        ptx::mma_m16n8k16<T>(o[0][2 * dp], pa, {vb[0], vb[1]});
        ptx::mma_m16n8k16<T>(o[0][2 * dp + 1], pa, {vb[2], vb[3]});
      }
    }

    if (j + 1 < kv.count)
      load_tile<KVTile, Bc, D, 128, true>(v_tiles + ((j + 1) & 1) * KVTile::kElements, v, (j + 1) * Bc, a.seq_k);
    ptx::cp_async_commit();
  }

  write_output(a, o, m, l, a.o + head * a.seq_q * D, a.lse + head * a.seq_q, i0 + warp_row0);
}

}  // namespace fa::step07::ladder
