// v1_tma_wgmma.cuh — rung 1 of stage 09's ladder, its first kernel: stage 07's forward with
// Hopper's data movement and tensor-core instruction. The tiles arrive by TMA (fa/cuda/hopper/
// tma.cuh) into the 128-byte swizzle and both products are wgmma (fa/cuda/hopper/wgmma.cuh),
// S = Q·K_jᵀ with both operands read from shared memory, O += P·V_j with P from registers. Every
// warp still does everything (loads are issued by one thread, the math by all): warp
// specialization, the producer/consumer split and FlashAttention-3's overlaps come in the next
// rungs.
//
// What changed from stage 07 (steps/07_tensor_cores/flash_tc_kernel.cuh):
//   - a warpgroup (4 warps, 128 threads) owns 64 query rows and issues one wgmma per 16-wide
//     k-step for all of them, where each warp issued Bc/8 mma.sync per k-step for its 16 or 32 rows;
//     no ldmatrix for Q, K or V: the tensor cores read them from shared memory by descriptor;
//   - the copies: one thread asks the TMA for a whole tile (Q once, K_j and V_j per tile, two
//     stages deep); the others wait on the stage's mbarrier, not on cp.async groups;
//   - rows and keys past the end come in as zeros from the TMA (no clamped copies); the masks,
//     the online softmax (fragment_softmax.cuh), the causal bounds and the epilogue are stage 07's,
//     on the same accumulator layout;
//   - the grid is (query tiles, heads): a head's tiles run together and share its K/V in L2
//     (block_work, below; every rung of the stage uses it).
//
//   block: kGroups warpgroups, Br = 64·kGroups query rows; warpgroup w owns rows [64w, 64w + 64)
//   per K/V tile j of Bc keys (stage s = j mod 2):
//     wait full[s]                                 (K_j, V_j landed)
//     S  = Q·K_jᵀ   wgmma m64nBc k16, D/16 steps   A: Q (shared), B: K_j (shared, K-major)
//     mask, P = online softmax of S, O rescaled    (registers, stage 07's functions)
//     O += P·V_j    wgmma m64nD k16, Bc/16 steps   A: P packed to 16 bits (registers), B: V_j
//                                                   (shared, MN-major: d runs along V's rows)
//     block barrier; one thread reloads stage s with K_{j+2}, V_{j+2}
//
// Predicted before its first run: none written (it ran before the ladder's table existed).
// Measured (chapter 09, the paper shapes, bf16): 1.08-1.55× stage 07's forward.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fa/cuda/tc/fragment_softmax.cuh"
#include "fa/cuda/tc/tile_ops.cuh"
#include "fa/cuda/hopper/tma.cuh"
#include "fa/cuda/hopper/wgmma.cuh"
#include "fa/cuda/ptx/mma.cuh"

namespace fa::step09 {
using namespace hopper;  // TMA, wgmma and warp-role wrappers (common/cuda/include/fa/cuda/hopper/)

using tc::KernelArgs;

// The tile shape: head dim D (64, 128 or 256), kGroups warpgroups of 64 query rows, Bc keys per
// tile (64 or 128: the width of one wgmma), kStages K/V buffers.
template <int D_, int kGroups_, int kBc_, int kStages_ = 2>
struct WgmmaConfig {
  static constexpr int D = D_, kGroups = kGroups_, kBc = kBc_, kStages = kStages_;
  static constexpr int kThreads = 128 * kGroups, kBr = 64 * kGroups;
  using QTile = tc::SwizzledTile<kBr, D>;
  using KVTile = tc::SwizzledTile<kBc, D>;
  static constexpr int kQBytes = QTile::kElements * 2, kKVBytes = KVTile::kElements * 2;
  // Q, then kStages × (K, V), then the mbarriers (Q's and one per stage); +1024 to align the base.
  static constexpr int kSmemBytes = kQBytes + 2 * kStages * kKVBytes + 8 * (1 + kStages) + 1024;
};

// The Q, K and V maps: [B·H][N][D], boxes of 64 columns × Br (Q) or Bc (K, V) rows (tma.cuh).
struct TileMaps {
  CUtensorMap q, k, v;
};

// The block's query tile and head. The grid is (query tiles, heads), so the tiles of one head are
// neighbours in launch order and the blocks resident at one time share a few heads' K and V in
// L2. With (heads, tiles), as stage 07 launches, the 132 resident blocks at B·H = 128 (D = 64,
// N = 4k) read 128 different K/V from HBM: the top rung measured 370 TFLOP/s there against 458
// in this order (chapter 09). Causal: each head's heaviest tiles first.
struct BlockWork {
  int tile, head;
};
__device__ __forceinline__ BlockWork block_work(bool heavy_first) {
  const unsigned tile = heavy_first ? gridDim.x - 1 - blockIdx.x : blockIdx.x, head = blockIdx.y;
  return {static_cast<int>(tile), static_cast<int>(head)};
}

template <class T, class C>
__global__ void __launch_bounds__(C::kThreads, 1)
    flash_wgmma_kernel(const __grid_constant__ TileMaps maps, const KernelArgs<T> a) {
  constexpr int D = C::D, Br = C::kBr, Bc = C::kBc, S = C::kStages, NT = Bc / 8, DT = D / 8;
  extern __shared__ unsigned char smem_raw[];
  // The 128-byte swizzle repeats every 8 rows of 128 bytes: each tile starts 1024-byte aligned.
  unsigned char* smem = smem_raw + ((1024 - (__cvta_generic_to_shared(smem_raw) & 1023)) & 1023);
  T* q_tile = reinterpret_cast<T*>(smem);
  T* kv_tiles = reinterpret_cast<T*>(smem + C::kQBytes);  // stage s: K at 2s, V at 2s + 1
  auto k_tile = [&](int s) { return kv_tiles + (2 * s) * C::KVTile::kElements; };
  auto v_tile = [&](int s) { return kv_tiles + (2 * s + 1) * C::KVTile::kElements; };
  std::uint64_t* q_full = reinterpret_cast<std::uint64_t*>(smem + C::kQBytes + 2 * S * C::kKVBytes);
  std::uint64_t* kv_full = q_full + 1;  // [S]

  const int warp = threadIdx.x / 32, group = warp / 4;
  const BlockWork work = block_work(a.heavy_first);
  const int tile = work.tile;
  const int i0 = tile * Br;
  const int head = work.head;
  const tc::KeyTiles kv = tc::key_tiles(i0, Br, Bc, a.seq_q, a.seq_k, a.causal);

  // One thread asks for K_j and V_j into stage j mod S.
  auto load_kv = [&](int j) {
    const int s = j % S;
    barrier_expect_bytes(&kv_full[s], 2 * tile_bytes<T, Bc, D>());
    load_tile_tma<T, Bc, D>(k_tile(s), &maps.k, j * Bc, head, &kv_full[s]);
    load_tile_tma<T, Bc, D>(v_tile(s), &maps.v, j * Bc, head, &kv_full[s]);
  };
  if (threadIdx.x == 0) {
    barrier_init(q_full, 1);
    for (int s = 0; s < S; ++s) barrier_init(&kv_full[s], 1);
  }
  __syncthreads();  // the barriers initialized before anyone waits on them
  if (threadIdx.x == 0 && kv.count > 0) {
    barrier_expect_bytes(q_full, tile_bytes<T, Br, D>());
    load_tile_tma<T, Br, D>(q_tile, &maps.q, i0, head, q_full);
    for (int j = 0; j < S && j < kv.count; ++j) load_kv(j);
  }

  // Shared addresses for the descriptors: this warpgroup's 64 rows of Q (8 KiB into each column block).
  const auto q_rows = static_cast<std::uint32_t>(__cvta_generic_to_shared(q_tile)) + group * 64 * 64 * sizeof(T);
  const int warp_row0 = 64 * group + 16 * (warp % 4);  // the warp's first row of the block's Br

  float o[1][DT][4] = {};
  float m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {};
  if (kv.count > 0) barrier_wait(q_full, 0);

  for (int j = 0; j < kv.count; ++j) {
    const int s = j % S;
    barrier_wait(&kv_full[s], static_cast<std::uint32_t>((j / S) & 1));  // K_j, V_j landed
    const auto k_addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(k_tile(s)));
    const auto v_addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(v_tile(s)));

    // S = Q·K_jᵀ: D/16 wgmmas, issued back to back, then one wait.
    float sc[1][NT][4];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      wgmma_ss<T, 0>(sc[0], k_major_step<T>(q_rows, kk, Br), k_major_step<T>(k_addr, kk, Bc), kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
    fence_accumulators(sc[0]);

    if (j >= kv.mask_from) tc::mask_scores(sc, i0 + warp_row0, j * Bc, a.seq_q, a.seq_k, a.causal);
    float alpha[2];
    tc::online_softmax(sc[0], m[0], l[0], alpha, a.scale_log2);
    tc::rescale(o[0], alpha);

    // O += P·V_j: P's A fragment of k-step ks is two 8-key accumulator tiles, packed (stage 07).
    std::uint32_t pa[Bc / 16][4];
#pragma unroll
    for (int ks = 0; ks < Bc / 16; ++ks) {
      pa[ks][0] = ptx::pack2<T>(sc[0][2 * ks][0], sc[0][2 * ks][1]);
      pa[ks][1] = ptx::pack2<T>(sc[0][2 * ks][2], sc[0][2 * ks][3]);
      pa[ks][2] = ptx::pack2<T>(sc[0][2 * ks + 1][0], sc[0][2 * ks + 1][1]);
      pa[ks][3] = ptx::pack2<T>(sc[0][2 * ks + 1][2], sc[0][2 * ks + 1][3]);
    }
    wgmma_fence();  // o was rescaled and pa written by ordinary instructions
#pragma unroll
    for (int ks = 0; ks < Bc / 16; ++ks) wgmma_rs<T, 1>(o[0], pa[ks], mn_major_step<T>(v_addr, ks, Bc), 1);
    wgmma_commit();
    wgmma_wait<0>();
    fence_accumulators(o[0]);

    __syncthreads();  // every warpgroup is done with stage s ...
    if (threadIdx.x == 0 && j + S < kv.count) load_kv(j + S);  // ... so it can take tile j + S
  }

  const std::int64_t first = static_cast<std::int64_t>(head) * a.seq_q;  // the head's first row of O and LSE
  tc::write_output(a, o, m, l, a.o + first * D, a.lse + first, i0 + warp_row0);
}

}  // namespace fa::step09
