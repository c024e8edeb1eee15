// v4_own_dq.cuh — rung 4 of stage 10's ladder: each warpgroup works through the query tiles on its
// own; no barrier of the whole block inside the loop.
//
// What changed from rung 3 (ladder/v3_dq_by_tma.cuh), one idea: nothing a warpgroup computes waits
// for the other one. Three things kept the two in step in rung 3, and each goes:
//   - dQ. At D = 128 each warpgroup computed 64 of dQ's columns over all 128 keys, so it read the
//     other's dS: the block barrier after dS's stores. Now each computes all of dQ's columns over
//     its own 64 keys (as at D = 64 already), into a dQ buffer of its own that its first thread
//     hands to the TMA's reduce-add; a barrier of its 128 threads (bar.sync id, 128) is all it needs.
//   - The Q/dO stages. A stage was free for the next load after the block barrier that ended the
//     tile. Now each warp, done with the stage (its dV and dK products waited for), counts itself
//     in a shared counter; the eighth warp to do so issues the load of the tile two steps on into
//     it. Whichever warpgroup is behind loads; the one ahead never waits for the other to load.
//   - dQ's buffers. Rung 3 had two, handed to the TMA by thread 0 after the tile's block barrier.
//     Now each warpgroup has one (the shared memory they take is the same), and its first thread
//     waits for the TMA to have read it (cp.async.bulk.wait_group.read 0) just before the
//     warpgroup's barrier that precedes the next dQ stores: a whole tile of products later.
//
// Why: rung 3's profile puts the largest share of the warps' waiting, 19 % (D = 128) and 16 %
// (D = 64) of the stall samples, at the block barrier after dS's stores, and the first product of
// each chain waiting to issue (docs/notes/10_hopper_backward.md): both warpgroups compute their
// exponentials at the same time and then both queue their products, so the tensor cores idle while
// the exponentials run. Apart, one warpgroup's exponentials can run under the other's products.
//
// The cost: at D = 128 twice the reduce-adds into L2 (each warpgroup adds a 64 × 128 float tile of
// partial sums over its 64 keys: 64 KiB a tile instead of 32); the same shared memory (210 KiB).
// Prediction, written before the first run: 1.05-1.15× rung 3 at D = 128, 1.05-1.12× at D = 64,
// causal like non-causal; less if L2's additions become the limit at D = 128.
// Measured (one H200, the paper shapes, one run; docs/results/step10_rungs4-6_h200/): 1.01-1.02× rung
// 3 at D = 64, below the prediction; 0.85-0.87× at D = 128, a loss. Nsight Compute at D = 128, 4k:
// L2 throughput 65 % of peak against rung 3's 42 %, the SM's 39 % against 45 %. The rungs above
// build on rung 3.
#pragma once

#include <cuda_runtime.h>

#include <cuda/atomic>

#include <cstdint>

#include <ds_transpose.cuh>  // holes/: the hole of exercise ex10
#include "10_hopper_backward/backward_maps.cuh"
#include "fa/cuda/backward/key_tiles.cuh"
#include "fa/cuda/hopper/tma.cuh"
#include "fa/cuda/hopper/warp_roles.cuh"
#include "fa/cuda/hopper/wgmma.cuh"
#include "fa/cuda/ptx/mma.cuh"
#include "fa/cuda/tc/tile_ops.cuh"

namespace fa::step10 {
using namespace hopper;  // TMA, wgmma and named-barrier wrappers (common/cuda/include/fa/cuda/hopper/)

// The tile shape: rung 3's (two warpgroups of 64 keys, Bc = 128; query tiles of Br = 64; two Q/dO
// stages); dQ's buffer: one per warpgroup, Br rows × D floats in boxes of Br × 32 (the TMA's).
template <int D_, int kGroups_>
struct OwnDqConfig {
  static constexpr int D = D_, kGroups = kGroups_;
  static constexpr int kBc = 64 * kGroups, kBr = 64, kThreads = 128 * kGroups, kStages = 2;
  using KVTile = tc::SwizzledTile<kBc, D>;
  using QTile = tc::SwizzledTile<kBr, D>;
  using DsTile = tc::SwizzledTile<kBr, kBc>;  // column block g: warpgroup g's 64 keys
  static constexpr int kKVBytes = KVTile::kElements * 2, kQBytes = QTile::kElements * 2,
                       kDsBytes = DsTile::kElements * 2;
  static constexpr int kRowsBytes = 2 * kBr * 4;  // per stage: LSE·log2e and D of the tile's rows
  static constexpr int kDqBoxFloats = kBr * hopper::kFloatBoxColumns;
  static constexpr int kDqPartBytes = (D / hopper::kFloatBoxColumns) * kDqBoxFloats * 4;  // one warpgroup's
  // K, V, kStages × (Q, dO), dS, kGroups dQ parts, kStages × rows, the mbarriers (K/V's, one per
  // stage), one release counter per stage; +1024 to align.
  static constexpr int kSmemBytes = 2 * kKVBytes + 2 * kStages * kQBytes + kDsBytes + kGroups * kDqPartBytes +
                                    kStages * kRowsBytes + 8 * (1 + kStages) + 4 * kStages + 1024;
  static_assert(bwd::kRowPadding % kBr == 0, "the per-row arrays are padded to whole query tiles");
  static_assert(kKVBytes % 1024 == 0 && kQBytes % 1024 == 0 && kDsBytes % 1024 == 0 && kDqPartBytes % 1024 == 0,
                "tiles: 1024-byte multiples");
};

template <class T, class C>
__global__ void __launch_bounds__(C::kThreads, 1)
    backward_own_dq_kernel(const __grid_constant__ BackwardMapsWithDq maps, const bwd::BackwardArgs<T> a,
                           const int heads_per_kv, int* /*dq_turns: none*/, const int /*query_tiles*/) {
  constexpr int D = C::D, Br = C::kBr, Bc = C::kBc, NQ = Br / 8, ND = D / 8;
  constexpr int kWarps = C::kThreads / 32;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (__cvta_generic_to_shared(smem_raw) & 1023)) & 1023);
  T* k_tile = reinterpret_cast<T*>(smem);
  T* v_tile = reinterpret_cast<T*>(smem + C::kKVBytes);
  T* qdo_tiles = reinterpret_cast<T*>(smem + 2 * C::kKVBytes);  // stage s: Q at 2s, dO at 2s + 1
  auto q_tile = [&](int s) { return qdo_tiles + (2 * s) * C::QTile::kElements; };
  auto do_tile = [&](int s) { return qdo_tiles + (2 * s + 1) * C::QTile::kElements; };
  T* ds_tile = reinterpret_cast<T*>(smem + 2 * C::kKVBytes + 2 * C::kStages * C::kQBytes);
  float* dq_parts = reinterpret_cast<float*>(smem + 2 * C::kKVBytes + 2 * C::kStages * C::kQBytes + C::kDsBytes);
  float* rows = dq_parts + C::kGroups * C::kDqPartBytes / 4;
  auto lse2_tile = [&](int s) { return rows + (2 * s) * Br; };
  auto delta_tile = [&](int s) { return rows + (2 * s + 1) * Br; };
  std::uint64_t* kv_full = reinterpret_cast<std::uint64_t*>(rows + 2 * C::kStages * Br);
  std::uint64_t* qdo_full = kv_full + 1;                            // [kStages]
  int* released = reinterpret_cast<int*>(qdo_full + C::kStages);  // [kStages]: warps done with the stage

  const int warp = threadIdx.x / 32, group = warp / 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const bool leader = threadIdx.x % 128 == 0;  // the warpgroup's first thread: its dQ's reduce-adds
  const int kv_head = static_cast<int>(blockIdx.y), j0 = static_cast<int>(blockIdx.x) * Bc;
  const bwd::QueryTiles tiles = bwd::query_tiles(j0, Bc, Br, a.seq_q, a.seq_k, a.causal);
  const int count = tiles.end - tiles.begin, steps = count * heads_per_kv;
  auto q_head_of = [&](int m) { return kv_head * heads_per_kv + m / count; };
  auto tile_of = [&](int m) { return tiles.begin + m % count; };

  auto load_qdo = [&](int m) {  // rung 3's: step m's Q, dO and rows into stage m mod 2
    const int s = m % C::kStages, q0 = tile_of(m) * Br, q_head = q_head_of(m);
    const std::int64_t rows0 = static_cast<std::int64_t>(q_head) * a.seq_q_padded;
    barrier_expect_bytes(&qdo_full[s], 2 * tile_bytes<T, Br, D>() + C::kRowsBytes);
    load_tile_tma<T, Br, D>(q_tile(s), &maps.q, q0, q_head, &qdo_full[s]);
    load_tile_tma<T, Br, D>(do_tile(s), &maps.d_o, q0, q_head, &qdo_full[s]);
    cuda::ptx::cp_async_bulk(cuda::ptx::space_cluster, cuda::ptx::space_global, lse2_tile(s), a.lse2 + rows0 + q0,
                             C::kRowsBytes / 2, &qdo_full[s]);
    cuda::ptx::cp_async_bulk(cuda::ptx::space_cluster, cuda::ptx::space_global, delta_tile(s), a.delta + rows0 + q0,
                             C::kRowsBytes / 2, &qdo_full[s]);
  };
  if (threadIdx.x == 0) {
    barrier_init(kv_full, 1);
    for (int s = 0; s < C::kStages; ++s) {
      barrier_init(&qdo_full[s], 1);
      released[s] = 0;
    }
  }
  __syncthreads();  // the barriers and counters initialized before anyone uses them
  if (threadIdx.x == 0 && steps > 0) {
    barrier_expect_bytes(kv_full, 2 * tile_bytes<T, Bc, D>());
    load_tile_tma<T, Bc, D>(k_tile, &maps.k, j0, kv_head, kv_full);
    load_tile_tma<T, Bc, D>(v_tile, &maps.v, j0, kv_head, kv_full);
    for (int m = 0; m < C::kStages && m < steps; ++m) load_qdo(m);  // both stages start empty
  }

  const auto k_addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(k_tile));
  const auto v_addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(v_tile));
  const std::uint32_t k_rows = k_addr + group * 64 * 64 * sizeof(T), v_rows = v_addr + group * 64 * 64 * sizeof(T);
  const auto ds_addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(ds_tile));
  const int key_row0 = 64 * group + 16 * (warp % 4);
  const int offset = a.seq_k - a.seq_q;
  const int group_barrier = 1 + group;  // bar.sync id (0 is __syncthreads): this warpgroup's 128 threads
  float* const dq_part = dq_parts + group * C::kDqPartBytes / 4;

  float dv[ND][4] = {}, dk[ND][4] = {};
  if (steps > 0) barrier_wait(kv_full, 0);

  for (int m = 0; m < steps; ++m) {
    const int s = m % C::kStages, i = tile_of(m), q0 = i * Br, q_head = q_head_of(m);
    barrier_wait(&qdo_full[s], static_cast<std::uint32_t>((m / C::kStages) & 1));  // Q_i, dO_i landed
    const auto q_addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(q_tile(s)));
    const auto do_addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(do_tile(s)));

    // Sᵀ, dPᵀ, Pᵀ, dSᵀ and their 16-bit A operands: rung 3's, unchanged.
    float st[NQ][4], dpt[NQ][4];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      wgmma_ss<T, 0>(st, k_major_step<T>(k_rows, kk, Bc), k_major_step<T>(q_addr, kk, Br), kk > 0);
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      wgmma_ss<T, 0>(dpt, k_major_step<T>(v_rows, kk, Bc), k_major_step<T>(do_addr, kk, Br), kk > 0);
    wgmma_commit();
    wgmma_wait<1>();
    fence_accumulators(st);
    const bool masked = i < tiles.unmasked_from;
#pragma unroll
    for (int j = 0; j < NQ; ++j) {
      const float2 l2 = *reinterpret_cast<const float2*>(lse2_tile(s) + 8 * j + 2 * t);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float p = exp2f(st[j][e] * a.scale_log2 - ((e & 1) ? l2.y : l2.x));
        if (masked) {
          const int key = j0 + key_row0 + g + (e >= 2 ? 8 : 0), query = q0 + 8 * j + 2 * t + (e & 1);
          if (key >= a.seq_k || (a.causal && key > query + offset)) p = 0.0f;
        }
        st[j][e] = p;
      }
    }
    wgmma_wait<0>();
    fence_accumulators(dpt);
#pragma unroll
    for (int j = 0; j < NQ; ++j) {
      const float2 d = *reinterpret_cast<const float2*>(delta_tile(s) + 8 * j + 2 * t);
#pragma unroll
      for (int e = 0; e < 4; ++e) dpt[j][e] = st[j][e] * (dpt[j][e] - ((e & 1) ? d.y : d.x));
    }
    std::uint32_t pa[Br / 16][4], dsa[Br / 16][4];
    pack_accumulator_as_a<T>(pa, st);
    pack_accumulator_as_a<T>(dsa, dpt);
    // dS into this warpgroup's column block of the tile. The previous tile's dQ products read it:
    // every warp of the warpgroup waited for its share of them before the barrier that ended that
    // tile, so it is free.
    store_ds_transposed<typename C::DsTile>(dsa, ds_tile, key_row0, g, t);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < Br / 16; ++ks) wgmma_rs<T, 1>(dv, pa[ks], mn_major_step<T>(do_addr, ks, Br), 1);
#pragma unroll
    for (int ks = 0; ks < Br / 16; ++ks) wgmma_rs<T, 1>(dk, dsa[ks], mn_major_step<T>(q_addr, ks, Br), 1);
    wgmma_commit();

    // The warpgroup's own dQ buffer: its first thread waits until the TMA has read the previous
    // tile's (handed over at the end of that tile), and the barrier passes that on with dS's stores.
    if (leader) cuda::ptx::cp_async_bulk_wait_group_read(cuda::ptx::n32_t<0>{});
    cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);  // dS's stores, visible to the tensor cores
    named_barrier_sync(group_barrier, 128);                  // this warpgroup's dS stored, its dQ buffer free
    wgmma_wait<0>();
    fence_accumulators(dv);
    fence_accumulators(dk);
    fence_operands(pa);
    fence_operands(dsa);

    // This warp is done with stage s (Q_i and dO_i read by its products, the rows by its threads):
    // it counts itself; the last of the block's warps loads step m + 2 into the stage.
    __syncwarp();
    if (lane == 0) {
      const int before = cuda::atomic_ref<int, cuda::thread_scope_block>(released[s]).fetch_add(
          1, cuda::memory_order_acq_rel);
      if (before % kWarps == kWarps - 1 && m + C::kStages < steps) load_qdo(m + C::kStages);
    }

    // dQ_i over this warpgroup's 64 keys, every column of D, 64 columns at a time, into its buffer
    // (rung 3's store: column c of the tile is column c mod 32 of box c / 32, swizzled).
#pragma unroll 1
    for (int cb = 0; cb < D / 64; ++cb) {
      float dq[8][4];
      const std::uint32_t k_block = k_addr + cb * Bc * 64 * sizeof(T);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < 4; ++ks)
        wgmma_ss<T, 1>(dq, k_major_step<T>(ds_addr, 4 * group + ks, Br), mn_major_step<T>(k_block, 4 * group + ks, Bc),
                       ks > 0);
      wgmma_commit();
      wgmma_wait<0>();
      fence_accumulators(dq);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = 16 * (warp % 4) + g + 8 * h;
#pragma unroll
        for (int jd = 0; jd < 8; ++jd) {
          const int col = cb * 64 + 8 * jd + 2 * t, in_box = col % kFloatBoxColumns;
          float* at = dq_part + (col / kFloatBoxColumns) * C::kDqBoxFloats + row * kFloatBoxColumns +
                      (((in_box / 4) ^ (row & 7)) * 4) + in_box % 4;
          *reinterpret_cast<float2*>(at) = make_float2(dq[jd][2 * h], dq[jd][2 * h + 1]);
        }
      }
    }
    cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);  // dQ's stores, visible to the TMA
    named_barrier_sync(group_barrier, 128);                  // the warpgroup's dQ stored, its dS read
    if (leader) {
      for (int b = 0; b < D / kFloatBoxColumns; ++b) {
        const std::int32_t coords[3] = {b * kFloatBoxColumns, q0, q_head};
        cuda::ptx::cp_reduce_async_bulk_tensor(cuda::ptx::space_global, cuda::ptx::space_shared, cuda::ptx::op_add,
                                               &maps.dq, coords, dq_part + b * C::kDqBoxFloats);
      }
      cuda::ptx::cp_async_bulk_commit_group();
    }
  }
  if (leader) cuda::ptx::cp_async_bulk_wait_group(cuda::ptx::n32_t<0>{});  // the last sums land

  // dK = τ·dSᵀQ, dV: rung 3's stores.
  const std::int64_t first = static_cast<std::int64_t>(kv_head) * a.seq_k;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int key = j0 + key_row0 + g + 8 * h;
    if (key >= a.seq_k) continue;
#pragma unroll
    for (int jd = 0; jd < ND; ++jd) {
      const std::int64_t at = (first + key) * D + 8 * jd + 2 * t;
      *reinterpret_cast<std::uint32_t*>(a.dk + at) = ptx::pack2<T>(a.scale * dk[jd][2 * h], a.scale * dk[jd][2 * h + 1]);
      *reinterpret_cast<std::uint32_t*>(a.dv + at) = ptx::pack2<T>(dv[jd][2 * h], dv[jd][2 * h + 1]);
    }
  }
}

}  // namespace fa::step10
