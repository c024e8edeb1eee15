// v2_warp_specialized.cuh — rung 2 of stage 09's ladder, warp specialization: the block's first
// warpgroup only moves data, the others only compute, and they meet on mbarriers instead of
// __syncthreads.
//
// What changed from v1_tma_wgmma.cuh (diff the two files):
//   - roles: warpgroup 0 is the producer. One of its threads issues every TMA copy (Q once, then
//     K_j and V_j into stage j mod S as soon as that stage is empty); the rest of it exits. The
//     consumers (warpgroups 1 .. kConsumers) run the loop of the first rung.
//   - registers: the producer gives its registers back (setmaxnreg.dec to 40 a thread) and the
//     consumers take them (setmaxnreg.inc to 232): warp_roles.cuh.
//   - barriers: per stage, k_full and v_full (the TMA's bytes landed; K and V apart, so that
//     S = Q·K_jᵀ starts before V_j is in) and kv_empty (one arrival per consumer warpgroup when its
//     products have read the stage). No block barrier in the loop: a consumer that finishes a tile
//     early starts the next one if its K has landed, and the producer refills a stage the moment
//     the last consumer lets go of it.
//
//   producer (1 thread):  Q ─► q_full;  for j: wait kv_empty[s] ─► K_j ─► k_full[s], V_j ─► v_full[s]
//   consumer warpgroup:   wait q_full; for j: wait k_full[s]; S = Q·K_jᵀ; softmax; wait v_full[s];
//                         O += P·V_j; arrive kv_empty[s]
//
// The kernel's parts are functions (WsShared, produce_tiles, issue_scores, issue_values) because
// the next rungs reuse them unchanged; P becomes wgmma's A operand by common's
// pack_accumulator_as_a (fa/cuda/hopper/wgmma.cuh).
//
// Predicted before its first run: 1.00-1.10× tma_wgmma at N ≥ 4k (the copies were already
// asynchronous, so what it removes is the block barrier per tile and the copy-issuing thread's
// detour; the softmax still waits for S and the products for the softmax). Measured (chapter 09,
// the paper shapes): 1.06-1.08×, inside the prediction.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fa/cuda/tc/fragment_softmax.cuh"
#include "fa/cuda/tc/tile_ops.cuh"
#include "09_hopper/ladder/v1_tma_wgmma.cuh"  // TileMaps, KernelArgs
#include "fa/cuda/hopper/tma.cuh"
#include "fa/cuda/hopper/warp_roles.cuh"
#include "fa/cuda/hopper/wgmma.cuh"
#include "fa/cuda/ptx/mma.cuh"

namespace fa::step09 {
using namespace hopper;  // TMA, wgmma and warp-role wrappers (common/cuda/include/fa/cuda/hopper/)

// The tile shape: head dim D (64, 128 or 256), kConsumers warpgroups of 64 query rows, Bc keys per
// tile (64 or 128), kStages K/V buffers; one producer warpgroup more.
template <int D_, int kConsumers_, int kBc_, int kStages_ = 2>
struct WsConfig {
  static constexpr int D = D_, kConsumers = kConsumers_, kBc = kBc_, kStages = kStages_;
  static constexpr int kThreads = 128 * (1 + kConsumers), kBr = 64 * kConsumers;
  // Registers a thread after setmaxnreg: 128·(40 + 232·2) = 64512 of the SM's 65536 at two
  // consumers, 128·(24 + 160·3) = 64512 at three.
  static constexpr int kProducerRegisters = kConsumers == 2 ? 40 : 24;
  static constexpr int kConsumerRegisters = kConsumers == 2 ? 232 : 160;
  static_assert(128 * (kProducerRegisters + kConsumers * kConsumerRegisters) <= 65536, "the registers must add up");
  using QTile = tc::SwizzledTile<kBr, D>;
  using KVTile = tc::SwizzledTile<kBc, D>;
  static constexpr int kQBytes = QTile::kElements * 2, kKVBytes = KVTile::kElements * 2;
  // Q, then kStages × (K, V), then the mbarriers (q_full, k_full[S], v_full[S], kv_empty[S]);
  // +1024 to align the base.
  static constexpr int kSmemBytes = kQBytes + 2 * kStages * kKVBytes + 8 * (1 + 3 * kStages) + 1024;
};

// The block's shared memory, carved: Q, kStages × (K, V), then the mbarriers.
template <class T, class C>
struct WsShared {
  T* q_tile;
  T* kv_tiles;             // stage s: K at 2s, V at 2s + 1
  std::uint64_t* q_full;   // Q landed
  std::uint64_t* k_full;   // [S] K_j landed in stage s
  std::uint64_t* v_full;   // [S] V_j landed in stage s
  std::uint64_t* kv_empty; // [S] every consumer is done with stage s

  __device__ explicit WsShared(unsigned char* smem_raw) {
    unsigned char* smem = smem_raw + ((1024 - (__cvta_generic_to_shared(smem_raw) & 1023)) & 1023);
    q_tile = reinterpret_cast<T*>(smem);
    kv_tiles = reinterpret_cast<T*>(smem + C::kQBytes);
    q_full = reinterpret_cast<std::uint64_t*>(smem + C::kQBytes + 2 * C::kStages * C::kKVBytes);
    k_full = q_full + 1;
    v_full = k_full + C::kStages;
    kv_empty = v_full + C::kStages;
  }
  __device__ T* k_tile(int s) const { return kv_tiles + (2 * s) * C::KVTile::kElements; }
  __device__ T* v_tile(int s) const { return kv_tiles + (2 * s + 1) * C::KVTile::kElements; }
  __device__ std::uint32_t k_addr(int s) const { return static_cast<std::uint32_t>(__cvta_generic_to_shared(k_tile(s))); }
  __device__ std::uint32_t v_addr(int s) const { return static_cast<std::uint32_t>(__cvta_generic_to_shared(v_tile(s))); }

  // One thread, before the block barrier that lets anyone wait on them.
  __device__ void init_barriers() const {
    barrier_init(q_full, 1);
    for (int s = 0; s < C::kStages; ++s) {
      barrier_init(&k_full[s], 1);
      barrier_init(&v_full[s], 1);
      barrier_init(&kv_empty[s], C::kConsumers);  // one arrival per consumer warpgroup
    }
  }
};

// The producer's one thread: Q once, then K_j and V_j into stage j mod S as soon as it is empty.
// `row0`: the first row of the block's sequence in every head's rows (0 here; a packed batch's
// sequences start further down, fa/cuda/policies/rows.cuh). The persistent rung (v5_persistent.cuh)
// calls the two parts once per query tile, with `it0` the K/V tiles the block loaded before: the
// stages and the mbarriers' phases run on.
template <class T, class C>
__device__ __forceinline__ void produce_q(const WsShared<T, C>& sh, const TileMaps& maps, int i0, int head,
                                          int row0 = 0) {
  barrier_expect_bytes(sh.q_full, tile_bytes<T, C::kBr, C::D>());
  load_tile_tma<T, C::kBr, C::D>(sh.q_tile, &maps.q, row0 + i0, head, sh.q_full);
}
template <class T, class C>
__device__ __forceinline__ void produce_kv(const WsShared<T, C>& sh, const TileMaps& maps, int kv_head, int count,
                                           int it0, int row0 = 0) {
  constexpr int S = C::kStages;
  for (int jj = 0; jj < count; ++jj) {  // jj: the tile's key tile (its keys); j: the block's count (its stage)
    const int j = it0 + jj, s = j % S;
    // Empty: the consumers released the tile j − S that was here (the first S pass at once).
    barrier_wait(&sh.kv_empty[s], static_cast<std::uint32_t>(((j / S) & 1) ^ 1));
    barrier_expect_bytes(&sh.k_full[s], tile_bytes<T, C::kBc, C::D>());
    load_tile_tma<T, C::kBc, C::D>(sh.k_tile(s), &maps.k, row0 + jj * C::kBc, kv_head, &sh.k_full[s]);
    barrier_expect_bytes(&sh.v_full[s], tile_bytes<T, C::kBc, C::D>());
    load_tile_tma<T, C::kBc, C::D>(sh.v_tile(s), &maps.v, row0 + jj * C::kBc, kv_head, &sh.v_full[s]);
  }
}
template <class T, class C>
__device__ __forceinline__ void produce_tiles(const WsShared<T, C>& sh, const TileMaps& maps, int i0, int head,
                                              int kv_head, int count, int row0 = 0) {
  produce_q(sh, maps, i0, head, row0);
  produce_kv(sh, maps, kv_head, count, 0, row0);
}

// The phase of tile j's wait on its stage's k_full or v_full: flips each time the stage is reused.
template <int S>
__device__ __forceinline__ std::uint32_t stage_phase(int j) {
  return static_cast<std::uint32_t>((j / S) & 1);
}

// A consumer warpgroup's two products, issued (not waited for). S = Q·K_jᵀ from shared memory;
// O += P·V_j with P from registers. Call wgmma_fence() first, wgmma_commit() after each.
template <class T, class C, int NT>
__device__ __forceinline__ void issue_scores(float (&sc)[NT][4], std::uint32_t q_rows, std::uint32_t k_addr) {
#pragma unroll
  for (int kk = 0; kk < C::D / 16; ++kk)
    wgmma_ss<T, 0>(sc, k_major_step<T>(q_rows, kk, C::kBr), k_major_step<T>(k_addr, kk, C::kBc), kk > 0);
}
template <class T, class C, int DT>
__device__ __forceinline__ void issue_values(float (&o)[DT][4], const std::uint32_t (&pa)[C::kBc / 16][4],
                                             std::uint32_t v_addr) {
#pragma unroll
  for (int ks = 0; ks < C::kBc / 16; ++ks) wgmma_rs<T, 1>(o, pa[ks], mn_major_step<T>(v_addr, ks, C::kBc), 1);
}

template <class T, class C>
__global__ void __launch_bounds__(C::kThreads, 1)
    flash_ws_kernel(const __grid_constant__ TileMaps maps, const KernelArgs<T> a) {
  constexpr int D = C::D, Br = C::kBr, Bc = C::kBc, S = C::kStages, NT = Bc / 8, DT = D / 8;
  extern __shared__ unsigned char smem_raw[];
  const WsShared<T, C> sh(smem_raw);

  const int warpgroup = threadIdx.x / 128;
  const BlockWork work = block_work(a.heavy_first);
  const int tile = work.tile;
  const int i0 = tile * Br;
  const int head = work.head;
  const tc::KeyTiles kv = tc::key_tiles(i0, Br, Bc, a.seq_q, a.seq_k, a.causal);

  if (threadIdx.x == 0) sh.init_barriers();
  __syncthreads();  // the barriers initialized before anyone waits on them; the last block barrier

  if (warpgroup == 0) {  // the producer
    release_registers<C::kProducerRegisters>();
    if (threadIdx.x == 0 && kv.count > 0) produce_tiles(sh, maps, i0, head, head, kv.count);
    return;
  }

  // A consumer warpgroup: rows [64·c, 64·c + 64) of the block's Br.
  take_registers<C::kConsumerRegisters>();
  const int consumer = warpgroup - 1, warp = threadIdx.x / 32 % 4;
  const auto q_rows =
      static_cast<std::uint32_t>(__cvta_generic_to_shared(sh.q_tile)) + consumer * 64 * 64 * sizeof(T);
  const int warp_row0 = 64 * consumer + 16 * warp;

  float o[1][DT][4] = {};
  float m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {};
  if (kv.count > 0) barrier_wait(sh.q_full, 0);

  for (int j = 0; j < kv.count; ++j) {
    const int s = j % S;
    barrier_wait(&sh.k_full[s], stage_phase<S>(j));  // K_j landed
    float sc[1][NT][4];
    wgmma_fence();
    issue_scores<T, C>(sc[0], q_rows, sh.k_addr(s));
    wgmma_commit();
    wgmma_wait<0>();
    fence_accumulators(sc[0]);

    if (j >= kv.mask_from) tc::mask_scores(sc, i0 + warp_row0, j * Bc, a.seq_q, a.seq_k, a.causal);
    float alpha[2];
    tc::online_softmax(sc[0], m[0], l[0], alpha, a.scale_log2);
    tc::rescale(o[0], alpha);

    std::uint32_t pa[Bc / 16][4];
    pack_accumulator_as_a<T>(pa, sc[0]);
    barrier_wait(&sh.v_full[s], stage_phase<S>(j));  // V_j landed
    wgmma_fence();
    issue_values<T, C>(o[0], pa, sh.v_addr(s));
    wgmma_commit();
    wgmma_wait<0>();
    fence_accumulators(o[0]);
    // The warpgroup's products have read K_j and V_j: one arrival lets the producer refill stage s.
    if (threadIdx.x % 128 == 0) barrier_arrive(&sh.kv_empty[s]);
  }

  const std::int64_t first = static_cast<std::int64_t>(head) * a.seq_q;  // the head's first row of O and LSE
  tc::write_output(a, o, m, l, a.o + first * D, a.lse + first, i0 + warp_row0);
}

}  // namespace fa::step09
