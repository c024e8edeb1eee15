// v5_addresses — v4 with the loop's integer work taken out: every ldmatrix address from one
// register per operand (an XOR per step, swizzled_at) where v2 .. v4 compute SwizzledTile::offset
// at every load, and whole K/V tiles copied by cp.async from one pointer plus constants, without a
// bound check per copy (load_tile_async; only the last, partial tile checks), shared memory named
// by 32-bit shared-window addresses (what ldmatrix and cp.async take). The arithmetic is v4's.
//
// What changed from v4 (diff ladder/v4_registers.cuh against this file): the addresses and the
// copies, as above; the tile shape as a V5Config, the stage's FlashConfig, with kMT = 1 (16 rows per
// warp, Br = 64, Bc = 64, as v1 .. v4); and each copy issued as soon as its buffer is free (K_{j+1}
// right after the first __syncthreads, V_{j+1} right after the second, where v3 and v4 issue them
// after the softmax and after P·V_j): a change of order that adds no instruction and that no run
// has timed alone (docs/notes/07_tensor_cores.md, "When the third rung issues its copies"). This
// is the stage's kernel (../flash_tc_kernel.cuh) at 16 rows per warp: the last step, flash,
// changes only the shape.
//
// Predicted (written before this rung was measured, from the two address changes measured alone in
//   the stage's kernel at N = 4096, not causal, Bc = 64: the swizzle once per thread 1.01x at
//   D = 64 and 1.08x at D = 128 (32 rows per warp, docs/results/step07_tune_swizzle_h100.txt),
//   then one address per operand and unchecked whole-tile copies 0.96-1.06x at D = 64 and
//   0.99-1.10x at D = 128 (16 and 32 rows per warp, step07_tune_addresses_h100.txt); over every
//   shape of the two files at Bc = 64, +1 to +8 % and -4 to +17 %): the product, 0.97-1.07x v4 at
//   D = 64 and 1.06-1.18x at D = 128.
// Measured (one H200, every rung verified in one run, N = 4096, not causal,
//   docs/results/step07_ladder_split_h200/step07_ladder_d64.json and _d128.json): 1.11x v4 at
//   D = 64 (264 TFLOP/s), 1.00x at D = 128 (286): outside the prediction at both head dims, the
//   other way round: the address changes carry the step at D = 64 and nothing at D = 128. v3 →
//   here in that run: 1.15x at D = 64, 1.07x at D = 128. Before the split, v3 → here was one step,
//   measured on the H100 as "v4_registers" (docs/results/step07_ladder_d64.json and _d128.json):
//   1.30x v3 at D = 64 (264 TFLOP/s), 1.07x at D = 128 (286); the H200's v3 is faster at D = 64
//   (230 TFLOP/s against 203), so compare ratios within one run.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fa/cuda/ptx/cp_async.cuh"
#include "fa/cuda/ptx/ldmatrix.cuh"
#include "fa/cuda/ptx/mma.cuh"
#include "fa/cuda/tc/fragment_softmax.cuh"
#include "fa/cuda/tc/tile_ops.cuh"

namespace fa::step07::ladder {
using namespace fa::tc;  // the tile and fragment building blocks (common/cuda/include/fa/cuda/tc/)

// The tile shape of one instantiation: head dim D, kWarps warps of 16·kMT query rows each, Bc keys
// per K/V tile, and at least kMinBlocks blocks per SM (the register budget: __launch_bounds__).
template <int D_, int kWarps_, int kMT_, int kBc_, int kMinBlocks_>
struct V5Config {
  static constexpr int D = D_, kWarps = kWarps_, kMT = kMT_, kBc = kBc_, kMinBlocks = kMinBlocks_;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBr = 16 * kMT * kWarps;
  using QTile = SwizzledTile<kBr, D>;
  using KVTile = SwizzledTile<kBc, D>;
  // Q, then two K buffers, then two V buffers.
  static constexpr int kSmemBytes = (QTile::kElements + 4 * KVTile::kElements) * 2;
};

template <class T, class C>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks) v5_addresses_kernel(const KernelArgs<T> a) {
  constexpr int D = C::D, Br = C::kBr, Bc = C::kBc, MT = C::kMT, NT = Bc / 8, DT = D / 8;
  using QTile = typename C::QTile;
  using KVTile = typename C::KVTile;
  extern __shared__ __align__(128) unsigned char smem[];
  // Shared memory by 32-bit shared-window addresses (what ldmatrix and cp.async take): Q, then two
  // K buffers, then two V buffers, kTileBytes apart.
  constexpr std::uint32_t kTileBytes = KVTile::kElements * sizeof(T);
  const std::uint32_t q_tile = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
  const std::uint32_t k_tiles = q_tile + QTile::kElements * sizeof(T);
  const std::uint32_t v_tiles = k_tiles + 2 * kTileBytes;

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int tile = a.heavy_first ? gridDim.y - 1 - blockIdx.y : blockIdx.y;
  const int i0 = tile * Br, warp_row0 = 16 * MT * warp;
  const std::int64_t head = blockIdx.x;
  const T* q = a.q + head * a.seq_q * D;
  const T* k = a.k + head * a.seq_k * D;
  const T* v = a.v + head * a.seq_k * D;
  const KeyTiles kv = key_tiles(i0, Br, Bc, a.seq_q, a.seq_k, a.causal);

  // Every ldmatrix row address of the loop, from one per-thread address per operand. A lane's rows
  // r have r mod 8 = lane mod 8, and its 16-byte chunk within a 64-column block is 2k + h (k: the
  // 16-wide step, h = 0 or 1 by lane), stored at (2k + h) XOR (lane mod 8) = (h XOR lane mod 8)
  // XOR 2k. Tiles and rows are 128-byte aligned, so the chunk is address bits 4-6 and the swizzled
  // address of step k is the step-0 address XOR 32·k: one LOP3 from a register (swizzled_at,
  // tile_ops.cuh), where v2 .. v4 compute SwizzledTile::offset at every load
  // (docs/07_tensor_cores.md, "The ladder, measured"). Column blocks (c / 64), the row steps
  // (16·mt, 16·np, 16·ks) and the K/V buffer are added after the XOR: constants, or a uniform
  // register, inside the instruction.
  const int chunk_qv = (lane / 16) ^ (lane % 8), chunk_k = (lane / 8 % 2) ^ (lane % 8);
  const std::uint32_t q_base = q_tile + sizeof(T) * ((warp_row0 + lane % 16) * 64 + chunk_qv * 8);
  const std::uint32_t k_base = k_tiles + sizeof(T) * ((lane % 8 + 8 * (lane / 16)) * 64 + chunk_k * 8);
  const std::uint32_t v_base = v_tiles + sizeof(T) * ((lane % 16) * 64 + chunk_qv * 8);
  auto q_at = [&](int mt, int kk) { return swizzled_at<T>(q_base, kk, mt, Br); };
  auto k_at = [&](std::uint32_t buffer, int np, int kk) { return swizzled_at<T>(k_base, kk, np, Bc) + buffer; };
  auto v_at = [&](std::uint32_t buffer, int ks, int dp) { return swizzled_at<T>(v_base, dp, ks, Bc) + buffer; };

  float o[MT][DT][4] = {};
  float m[MT][2], l[MT][2] = {};
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) m[mt][0] = m[mt][1] = -INFINITY;

  if (kv.count > 0) {
    load_tile_async<QTile, Br, D, C::kThreads>(q_tile, q, i0, a.seq_q);
    load_tile_async<KVTile, Bc, D, C::kThreads>(k_tiles, k, 0, a.seq_k);
    ptx::cp_async_commit();  // group: Q, K_0
    load_tile_async<KVTile, Bc, D, C::kThreads>(v_tiles, v, 0, a.seq_k);
    ptx::cp_async_commit();  // group: V_0
  }

  for (int j = 0; j < kv.count; ++j) {
    const std::uint32_t buffer = (j & 1) * kTileBytes, next_buffer = kTileBytes - buffer;
    ptx::cp_async_wait<1>();  // Q and K_j have landed (V_j may still be in flight) ...
    __syncthreads();          // ... for every thread's copies
    // K_{j+1} into the other buffer: its last reader, S_{j−1}, finished before the __syncthreads
    // above. It lands behind S_j, the softmax and P·V_j. An empty group when there is none keeps
    // the count of groups the waits rely on.
    if (j + 1 < kv.count)
      load_tile_async<KVTile, Bc, D, C::kThreads>(k_tiles + next_buffer, k, (j + 1) * Bc, a.seq_k);
    ptx::cp_async_commit();

    // S = Q·K_jᵀ, D/16 steps of k = 16.
    float s[MT][NT][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      std::uint32_t qa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
          ptx::ldmatrix_x4(qa[mt], q_at(mt, kk));
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        // Keys 16·np .. +15, d 16·kk .. +15: the B fragments of two 8-key column tiles.
        std::uint32_t kb[4];
        ptx::ldmatrix_x4(kb, k_at(buffer, np, kk));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          ptx::mma_m16n8k16<T>(s[mt][2 * np], qa[mt], {kb[0], kb[1]});
          ptx::mma_m16n8k16<T>(s[mt][2 * np + 1], qa[mt], {kb[2], kb[3]});
        }
      }
    }
    if (j >= kv.mask_from) mask_scores(s, i0 + warp_row0, j * Bc, a.seq_q, a.seq_k, a.causal);

    // P = online softmax of S, in place; O's rows rescaled by 2^((m_old − m_new)·τlog2e).
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      float alpha[2];
      online_softmax(s[mt], m[mt], l[mt], alpha, a.scale_log2);
      rescale(o[mt], alpha);
    }

    ptx::cp_async_wait<1>();  // V_j has landed (K_{j+1} may still be in flight)
    __syncthreads();
    // V_{j+1} into the other buffer: its last reader, P·V_{j−1}, finished before this tile's first
    // __syncthreads. It lands behind P·V_j and S_{j+1}.
    if (j + 1 < kv.count)
      load_tile_async<KVTile, Bc, D, C::kThreads>(v_tiles + next_buffer, v, (j + 1) * Bc, a.seq_k);
    ptx::cp_async_commit();

    // O += P·V_j, Bc/16 steps of k = 16 keys; P's A fragment is two S accumulators, packed.
#pragma unroll
    for (int ks = 0; ks < Bc / 16; ++ks) {
      std::uint32_t pa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        pa[mt][0] = ptx::pack2<T>(s[mt][2 * ks][0], s[mt][2 * ks][1]);
        pa[mt][1] = ptx::pack2<T>(s[mt][2 * ks][2], s[mt][2 * ks][3]);
        pa[mt][2] = ptx::pack2<T>(s[mt][2 * ks + 1][0], s[mt][2 * ks + 1][1]);
        pa[mt][3] = ptx::pack2<T>(s[mt][2 * ks + 1][2], s[mt][2 * ks + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        // Keys 16·ks .. +15, d 16·dp .. +15, transposed: the B fragments of two 8-wide d tiles.
        std::uint32_t vb[4];
        ptx::ldmatrix_x4_trans(vb, v_at(buffer, ks, dp));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          ptx::mma_m16n8k16<T>(o[mt][2 * dp], pa[mt], {vb[0], vb[1]});
          ptx::mma_m16n8k16<T>(o[mt][2 * dp + 1], pa[mt], {vb[2], vb[3]});
        }
      }
    }
  }

  write_output(a, o, m, l, a.o + head * a.seq_q * D, a.lse + head * a.seq_q, i0 + warp_row0);
}

}  // namespace fa::step07::ladder
