// v2_ldmatrix — v1 with ldmatrix and a swizzled shared-memory layout: one instruction gives each
// thread four fragment registers (v1: eight 32-bit loads, or sixteen 16-bit ones for V), and the
// XOR swizzle puts the 8 rows each ldmatrix phase reads into 8 different bank groups (v1's
// row-major tiles put them all in one: 8-way conflicts).
//
// What changed from v1 (diff ladder/v1_mma.cuh against this file): PlainTile → SwizzledTile, the
// fragment gathers → ldmatrix / ldmatrix.trans; the loads and the loop are v1's.
//
// Predicted (the chapter's "expected" column, written after a first exploratory run of the
//   ladder, so not blind): conflicts gone and a quarter of the load instructions: 3-5x v1.
// Measured (H100, bf16, the paper shapes at 4k, not causal, docs/results/step07_ladder_d64.json and
//   _d128.json): 4.48x v1 at D = 64 (187 TFLOP/s), 4.08x at D = 128 (183).
#pragma once

#include "fa/cuda/tc/fragment_softmax.cuh"
#include "fa/cuda/tc/tile_ops.cuh"
#include "fa/cuda/ptx/ldmatrix.cuh"
#include "fa/cuda/ptx/mma.cuh"

namespace fa::step07::ladder {
using namespace fa::tc;  // the tile and fragment building blocks (common/cuda/include/fa/cuda/tc/)

template <int D>
struct V2 {
  static constexpr int kThreads = 128, kBr = 64, kBc = 64;
  using QTile = SwizzledTile<kBr, D>;
  using KVTile = SwizzledTile<kBc, D>;
  using PTile = SwizzledTile<16, kBc>;  // one per warp
  static constexpr int kSmemBytes = (QTile::kElements + 2 * KVTile::kElements + 4 * PTile::kElements) * 2;
};

template <class T, int D>
__global__ void __launch_bounds__(128) v2_ldmatrix_kernel(const KernelArgs<T> a) {
  constexpr int Br = V2<D>::kBr, Bc = V2<D>::kBc, NT = Bc / 8, DT = D / 8;
  using QTile = typename V2<D>::QTile;
  using KVTile = typename V2<D>::KVTile;
  using PTile = typename V2<D>::PTile;
  extern __shared__ __align__(128) unsigned char smem[];
  T* q_tile = reinterpret_cast<T*>(smem);
  T* k_tile = q_tile + QTile::kElements;
  T* v_tile = k_tile + KVTile::kElements;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  T* p_tile = v_tile + KVTile::kElements + warp * PTile::kElements;

  const int tile = a.heavy_first ? gridDim.y - 1 - blockIdx.y : blockIdx.y;
  const int i0 = tile * Br, warp_row0 = 16 * warp;
  const std::int64_t head = blockIdx.x;
  const T* q = a.q + head * a.seq_q * D;
  const T* k = a.k + head * a.seq_k * D;
  const T* v = a.v + head * a.seq_k * D;
  const KeyTiles kv = key_tiles(i0, Br, Bc, a.seq_q, a.seq_k, a.causal);

  float o[1][DT][4] = {};
  float m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {};
  load_tile<QTile, Br, D, 128, false>(q_tile, q, i0, a.seq_q);

  for (int j = 0; j < kv.count; ++j) {
    __syncthreads();  // every warp is done with K_{j−1} and V_{j−1}
    load_tile<KVTile, Bc, D, 128, false>(k_tile, k, j * Bc, a.seq_k);
    load_tile<KVTile, Bc, D, 128, false>(v_tile, v, j * Bc, a.seq_k);
    __syncthreads();

    float s[1][NT][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      std::uint32_t qa[4];
      ptx::ldmatrix_x4(qa, q_tile + QTile::offset(warp_row0 + lane % 16, 16 * kk + 8 * (lane / 16)));
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        // Keys 16·np .. +15, d 16·kk .. +15: the B fragments of two 8-key column tiles.
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

    // P to the warp's own tile (16-bit, swizzled), read back as A fragments by ldmatrix.
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        *reinterpret_cast<std::uint32_t*>(p_tile + PTile::offset(g + 8 * r, 8 * n) + 2 * t) =
            ptx::pack2<T>(s[0][n][2 * r], s[0][n][2 * r + 1]);
    __syncwarp();

#pragma unroll
    for (int ks = 0; ks < Bc / 16; ++ks) {
      std::uint32_t pa[4];
      ptx::ldmatrix_x4(pa, p_tile + PTile::offset(lane % 16, 16 * ks + 8 * (lane / 16)));
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        // Keys 16·ks .. +15, d 16·dp .. +15, transposed: the B fragments of two 8-wide d tiles.
        std::uint32_t vb[4];
        ptx::ldmatrix_x4_trans(vb, v_tile + KVTile::offset(16 * ks + lane % 16, 16 * dp + 8 * (lane / 16)));
        ptx::mma_m16n8k16<T>(o[0][2 * dp], pa, {vb[0], vb[1]});
        ptx::mma_m16n8k16<T>(o[0][2 * dp + 1], pa, {vb[2], vb[3]});
      }
    }
    __syncwarp();  // the warp's P tile is rewritten by the next tile
  }

  write_output(a, o, m, l, a.o + head * a.seq_q * D, a.lse + head * a.seq_q, i0 + warp_row0);
}

}  // namespace fa::step07::ladder
