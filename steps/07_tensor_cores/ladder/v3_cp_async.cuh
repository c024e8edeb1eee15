// v3_cp_async — v2 with the K and V tiles copied by cp.async into two buffers each: K_{j+1} lands
// while P·V_j runs, V_{j+1} while S_{j+1} runs, instead of every warp waiting for each copy.
//
// What changed from v2 (diff ladder/v2_ldmatrix.cuh against this file): the loads (cp.async, two
// buffers, a commit/wait per copy) and where the __syncthreads go; the arithmetic is v2's.
//
// Predicted (the chapter's "expected" column, written after a first exploratory run of the
//   ladder, so not blind): 1.10-1.20x v2 (stage 04's cp.async rung gave 1.18x).
// Measured (H100, bf16, the paper shapes at 4k, not causal, docs/results/step07_ladder_d64.json and
//   _d128.json): 1.09x v2 at D = 64 (203 TFLOP/s), 1.45x at D = 128 (266), where a tile of 64
//   keys is twice the copy every warp waited for in v2.
#pragma once

#include "fa/cuda/tc/fragment_softmax.cuh"
#include "fa/cuda/tc/tile_ops.cuh"
#include "fa/cuda/ptx/cp_async.cuh"
#include "fa/cuda/ptx/ldmatrix.cuh"
#include "fa/cuda/ptx/mma.cuh"

namespace fa::step07::ladder {
using namespace fa::tc;  // the tile and fragment building blocks (common/cuda/include/fa/cuda/tc/)

template <int D>
struct V3 {
  static constexpr int kThreads = 128, kBr = 64, kBc = 64;
  using QTile = SwizzledTile<kBr, D>;
  using KVTile = SwizzledTile<kBc, D>;
  using PTile = SwizzledTile<16, kBc>;  // one per warp
  static constexpr int kSmemBytes = (QTile::kElements + 4 * KVTile::kElements + 4 * PTile::kElements) * 2;
};

template <class T, int D>
__global__ void __launch_bounds__(128) v3_cp_async_kernel(const KernelArgs<T> a) {
  constexpr int Br = V3<D>::kBr, Bc = V3<D>::kBc, NT = Bc / 8, DT = D / 8;
  using QTile = typename V3<D>::QTile;
  using KVTile = typename V3<D>::KVTile;
  using PTile = typename V3<D>::PTile;
  extern __shared__ __align__(128) unsigned char smem[];
  T* q_tile = reinterpret_cast<T*>(smem);
  T* k_tiles = q_tile + QTile::kElements;        // [2][KVTile]
  T* v_tiles = k_tiles + 2 * KVTile::kElements;  // [2][KVTile]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  T* p_tile = v_tiles + 2 * KVTile::kElements + warp * PTile::kElements;

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

    // P to the warp's own tile (16-bit, swizzled), to be read back as A fragments.
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        *reinterpret_cast<std::uint32_t*>(p_tile + PTile::offset(g + 8 * r, 8 * n) + 2 * t) =
            ptx::pack2<T>(s[0][n][2 * r], s[0][n][2 * r + 1]);
    __syncwarp();

    if (j + 1 < kv.count)
      load_tile<KVTile, Bc, D, 128, true>(k_tiles + ((j + 1) & 1) * KVTile::kElements, k, (j + 1) * Bc, a.seq_k);
    ptx::cp_async_commit();
    ptx::cp_async_wait<1>();  // V_j has landed (K_{j+1} may still be in flight)
    __syncthreads();

#pragma unroll
    for (int ks = 0; ks < Bc / 16; ++ks) {
      std::uint32_t pa[4];
      ptx::ldmatrix_x4(pa, p_tile + PTile::offset(lane % 16, 16 * ks + 8 * (lane / 16)));
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
