// v1_mma — stage 05's loop with both products on the tensor cores, written the first way the PTX
// manual suggests: each thread gathers its fragment registers (fa/cuda/ptx/mma.cuh) from plain
// row-major shared tiles with 32-bit loads, and P goes through shared memory between the two
// products, as the A operand of the second.
//
// What changed from stage 05: fp16/bf16 tiles; S = Q·Kᵀ and O += P·V as mma.sync.m16n8k16, warp by
// warp (each of the 4 warps owns 16 of the block's 64 query rows); the softmax on the accumulator
// registers (fragment_softmax.cuh). What it costs, measured in the chapter: bank conflicts (the 8
// rows a fragment load touches share banks when a row is 128 or 256 bytes long), two 16-bit loads
// per V register (V's B fragment pairs two keys, which are two rows apart), and synchronous copies.
//
// Predicted (the chapter's "expected" column, written after a first exploratory run of the
//   ladder, so not blind): the tensor cores, but fed by 32-bit gathers with 8-way conflicts: a few
//   times stage 05 at best.
// Measured (H100, bf16, the paper shapes at 4k, not causal, docs/results/step07_ladder_d64.json and
//   _d128.json): 41.7 TFLOP/s at D = 64, 44.9 at D = 128: stage 05's speed.
#pragma once

#include "fa/cuda/tc/fragment_softmax.cuh"
#include "fa/cuda/tc/tile_ops.cuh"
#include "fa/cuda/ptx/mma.cuh"

namespace fa::step07::ladder {
using namespace fa::tc;  // the tile and fragment building blocks (common/cuda/include/fa/cuda/tc/)

template <int D>
struct V1 {
  static constexpr int kThreads = 128, kBr = 64, kBc = 64;
  using QTile = PlainTile<kBr, D>;
  using KVTile = PlainTile<kBc, D>;
  using PTile = PlainTile<16, kBc>;  // one per warp
  static constexpr int kSmemBytes = (QTile::kElements + 2 * KVTile::kElements + 4 * PTile::kElements) * 2;
};

// The 32-bit register holding X[r][c] and X[r][c + 1] (16-bit elements, row-major, c even).
template <class Tile, class T>
__device__ __forceinline__ std::uint32_t pair_at(const T* tile, int r, int c) {
  return *reinterpret_cast<const std::uint32_t*>(tile + Tile::offset(r, c));
}

// X[r][c] (low half) and X[r + 1][c] (high half): a B register of a matrix stored k-major (V).
template <class Tile, class T>
__device__ __forceinline__ std::uint32_t column_pair_at(const T* tile, int r, int c) {
  const std::uint16_t lo = *reinterpret_cast<const std::uint16_t*>(tile + Tile::offset(r, c));
  const std::uint16_t hi = *reinterpret_cast<const std::uint16_t*>(tile + Tile::offset(r + 1, c));
  return lo | (static_cast<std::uint32_t>(hi) << 16);
}

template <class T, int D>
__global__ void __launch_bounds__(128) v1_mma_kernel(const KernelArgs<T> a) {
  constexpr int Br = V1<D>::kBr, Bc = V1<D>::kBc, NT = Bc / 8, DT = D / 8;
  using QTile = typename V1<D>::QTile;
  using KVTile = typename V1<D>::KVTile;
  using PTile = typename V1<D>::PTile;
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

    // S = Q·K_jᵀ: A = the warp's 16 Q rows, B = Kᵀ, whose column n is K's row n.
    float s[1][NT][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const int r = warp_row0 + g, c = 16 * kk + 2 * t;
      const std::uint32_t qa[4] = {pair_at<QTile>(q_tile, r, c), pair_at<QTile>(q_tile, r + 8, c),
                                   pair_at<QTile>(q_tile, r, c + 8), pair_at<QTile>(q_tile, r + 8, c + 8)};
#pragma unroll
      for (int n = 0; n < NT; ++n)
        ptx::mma_m16n8k16<T>(s[0][n], qa, {pair_at<KVTile>(k_tile, 8 * n + g, c), pair_at<KVTile>(k_tile, 8 * n + g, c + 8)});
    }
    if (j >= kv.mask_from) mask_scores(s, i0 + warp_row0, j * Bc, a.seq_q, a.seq_k, a.causal);
    float alpha[2];
    online_softmax(s[0], m[0], l[0], alpha, a.scale_log2);
    rescale(o[0], alpha);

    // P to the warp's own tile as 16-bit pairs, then back as A fragments.
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        *reinterpret_cast<std::uint32_t*>(p_tile + PTile::offset(g + 8 * r, 8 * n + 2 * t)) =
            ptx::pack2<T>(s[0][n][2 * r], s[0][n][2 * r + 1]);
    __syncwarp();

    // O += P·V_j: B = V, k along V's rows: each register pairs two rows of one column.
#pragma unroll
    for (int ks = 0; ks < Bc / 16; ++ks) {
      const int c = 16 * ks + 2 * t;
      const std::uint32_t pa[4] = {pair_at<PTile>(p_tile, g, c), pair_at<PTile>(p_tile, g + 8, c),
                                   pair_at<PTile>(p_tile, g, c + 8), pair_at<PTile>(p_tile, g + 8, c + 8)};
#pragma unroll
      for (int n = 0; n < DT; ++n)
        ptx::mma_m16n8k16<T>(o[0][n], pa, {column_pair_at<KVTile>(v_tile, c, 8 * n + g),
                                          column_pair_at<KVTile>(v_tile, c + 8, 8 * n + g)});
    }
    __syncwarp();  // the warp's P tile is rewritten by the next tile
  }

  write_output(a, o, m, l, a.o + head * a.seq_q * D, a.lse + head * a.seq_q, i0 + warp_row0);
}

}  // namespace fa::step07::ladder
