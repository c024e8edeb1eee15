// v2_rows_in_shared.cuh — rung 2 of stage 10's ladder: the query tile's LSE·log2e and D arrive in
// shared memory with Q and dO, so that recomputing Pᵀ and dSᵀ reads nothing from global memory.
//
// What changed from rung 1 (ladder/v1_wgmma.cuh), one idea: rung 1 read the two floats of each of
// a thread's query columns, LSE·log2e and D = rowsum(dO∘O), from global memory around the wait
// for Sᵀ — the wait's "memory" clobber keeps the compiler from issuing most of those loads any
// earlier, so every thread met a round trip to L2 at its first exp2 of every tile. Here the thread
// that asks the TMA for Q_i and dO_i also asks for the tile's Br values of each array (two bulk
// copies, cp.async.bulk, 256 bytes each; the arrays are padded to whole query tiles) into a small
// buffer beside Q and dO, on the same mbarrier: they are in shared memory before anyone waits for
// Q_i. Everything else is rung 1's, line for line.
//
// Prediction, written before the run, from a profile of rung 1 (Nsight Compute, one H200, bf16,
// N = 4k at the paper shapes; docs/notes/10_hopper_backward.md): 27 % of the warps' stall samples
// at D = 128 and about 25 % at D = 64 sit on the first use of the loaded LSE·log2e (the FFMA before
// MUFU.EX2, "long scoreboard": waiting for global memory). If that wait goes and nothing else takes
// its place, 1.10-1.25× rung 1 at both head dims; less where the atomics (about 10 % of the samples,
// "LSU queue") or the block barriers become the next wait.
// Read again after the run, with each line's scoreboard bits (docs/notes/10_hopper_backward.md):
// the largest line at D = 128 (13.6 %) and a loop branch at D = 64 (7.4 %) wait for the dQ atomics
// to release their address registers, not for the loads; the loads' share is about 14 % at D = 128
// and 20 % at D = 64, the atomics' about 23 % and 20 %.
//
// Measured (one H200, bf16, paper shapes, median of 20, rung 1 and stage 08 in the same run;
// docs/results/step10_rung2_h200/): D = 128 372 / 394 TFLOP/s at 4k / 16k, 1.12× / 1.19× rung 1;
// causal 327 / 392, 1.08× / 1.08×. D = 64 250 / 266, 1.21× / 1.19×; causal 226 / 261, 1.17× /
// 1.18×. Inside the prediction except D = 128 causal, a little below it. Against stage 08 in that
// run: 1.27-1.28× at D = 128 (1.19× / 1.28× causal), 0.89-0.93× at D = 64.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include <ds_transpose.cuh>  // holes/: the hole of exercise ex10
#include "10_hopper_backward/backward_maps.cuh"
#include "fa/cuda/backward/key_tiles.cuh"
#include "fa/cuda/hopper/tma.cuh"
#include "fa/cuda/hopper/wgmma.cuh"
#include "fa/cuda/ptx/mma.cuh"
#include "fa/cuda/tc/tile_ops.cuh"

namespace fa::step10 {
using namespace hopper;  // TMA and wgmma wrappers (common/cuda/include/fa/cuda/hopper/)

// The tile shape: head dim D (64 or 128), kGroups warpgroups of 64 keys (Bc = 64·kGroups), query
// tiles of Br = 64 (the per-row arrays' padding, bwd::kRowPadding), two Q/dO buffers.
template <int D_, int kGroups_>
struct RowsInSharedConfig {
  static constexpr int D = D_, kGroups = kGroups_;
  static constexpr int kBc = 64 * kGroups, kBr = 64, kThreads = 128 * kGroups, kStages = 2;
  using KVTile = tc::SwizzledTile<kBc, D>;  // K, V: [keys][D]
  using QTile = tc::SwizzledTile<kBr, D>;   // Q, dO: [queries][D]
  using DsTile = tc::SwizzledTile<kBr, kBc>;  // dS: [queries][keys], K-major for dQ = dS·K
  static constexpr int kKVBytes = KVTile::kElements * 2, kQBytes = QTile::kElements * 2,
                       kDsBytes = DsTile::kElements * 2;
  // dQ's 64-column blocks per warpgroup: each warpgroup takes whole column blocks over all Bc keys
  // when there are enough of them, else every column block over its own 64 keys.
  static constexpr bool kDqSplitsKeys = D / 64 < kGroups;
  // Per stage, the query tile's LSE·log2e and D (Br floats each), brought with Q and dO.
  static constexpr int kRowsBytes = 2 * kBr * 4;
  // K, V, then kStages × (Q, dO), dS, kStages × (LSE·log2e, D), then the mbarriers (K/V's and one
  // per stage); +1024 to align.
  static constexpr int kSmemBytes =
      2 * kKVBytes + 2 * kStages * kQBytes + kDsBytes + kStages * kRowsBytes + 8 * (1 + kStages) + 1024;
  // Every tile starts 1024-byte aligned (the swizzle's period) if each size is a multiple of it.
  static_assert(bwd::kRowPadding % kBr == 0, "the per-row arrays are padded to whole query tiles");
  static_assert(kKVBytes % 1024 == 0 && kQBytes % 1024 == 0 && kDsBytes % 1024 == 0, "tiles: 1024-byte multiples");
};

template <class T, class C>
__global__ void __launch_bounds__(C::kThreads, 1)
    backward_rows_kernel(const __grid_constant__ BackwardMaps maps, const bwd::BackwardArgs<T> a) {
  constexpr int D = C::D, Br = C::kBr, Bc = C::kBc, NQ = Br / 8, ND = D / 8;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (__cvta_generic_to_shared(smem_raw) & 1023)) & 1023);
  T* k_tile = reinterpret_cast<T*>(smem);
  T* v_tile = reinterpret_cast<T*>(smem + C::kKVBytes);
  T* qdo_tiles = reinterpret_cast<T*>(smem + 2 * C::kKVBytes);  // stage s: Q at 2s, dO at 2s + 1
  auto q_tile = [&](int s) { return qdo_tiles + (2 * s) * C::QTile::kElements; };
  auto do_tile = [&](int s) { return qdo_tiles + (2 * s + 1) * C::QTile::kElements; };
  T* ds_tile = reinterpret_cast<T*>(smem + 2 * C::kKVBytes + 2 * C::kStages * C::kQBytes);
  float* rows = reinterpret_cast<float*>(smem + 2 * C::kKVBytes + 2 * C::kStages * C::kQBytes + C::kDsBytes);
  auto lse2_tile = [&](int s) { return rows + (2 * s) * Br; };  // stage s: LSE·log2e, then D
  auto delta_tile = [&](int s) { return rows + (2 * s + 1) * Br; };
  std::uint64_t* kv_full = reinterpret_cast<std::uint64_t*>(rows + 2 * C::kStages * Br);
  std::uint64_t* qdo_full = kv_full + 1;  // [kStages]

  const int warp = threadIdx.x / 32, group = warp / 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int head = static_cast<int>(blockIdx.y), j0 = static_cast<int>(blockIdx.x) * Bc;
  const bwd::QueryTiles tiles = bwd::query_tiles(j0, Bc, Br, a.seq_q, a.seq_k, a.causal);
  const int count = tiles.end - tiles.begin;

  // One thread asks for query tile tiles.begin + n (Q and dO by the TMA, its rows' LSE·log2e and D
  // by two bulk copies of Br floats: the arrays are padded to whole tiles, 256-byte aligned) into
  // stage n mod 2, all four completing on one mbarrier.
  const std::int64_t rows0 = static_cast<std::int64_t>(head) * a.seq_q_padded;
  auto load_qdo = [&](int n) {
    const int s = n % C::kStages, q0 = (tiles.begin + n) * Br;
    barrier_expect_bytes(&qdo_full[s], 2 * tile_bytes<T, Br, D>() + C::kRowsBytes);
    load_tile_tma<T, Br, D>(q_tile(s), &maps.q, q0, head, &qdo_full[s]);
    load_tile_tma<T, Br, D>(do_tile(s), &maps.d_o, q0, head, &qdo_full[s]);
    cuda::ptx::cp_async_bulk(cuda::ptx::space_cluster, cuda::ptx::space_global, lse2_tile(s), a.lse2 + rows0 + q0,
                             C::kRowsBytes / 2, &qdo_full[s]);
    cuda::ptx::cp_async_bulk(cuda::ptx::space_cluster, cuda::ptx::space_global, delta_tile(s), a.delta + rows0 + q0,
                             C::kRowsBytes / 2, &qdo_full[s]);
  };
  if (threadIdx.x == 0) {
    barrier_init(kv_full, 1);
    for (int s = 0; s < C::kStages; ++s) barrier_init(&qdo_full[s], 1);
  }
  __syncthreads();  // the barriers initialized before anyone waits on them
  if (threadIdx.x == 0 && count > 0) {
    barrier_expect_bytes(kv_full, 2 * tile_bytes<T, Bc, D>());
    load_tile_tma<T, Bc, D>(k_tile, &maps.k, j0, head, kv_full);
    load_tile_tma<T, Bc, D>(v_tile, &maps.v, j0, head, kv_full);
    load_qdo(0);
  }

  // Shared addresses for the descriptors: this warpgroup's 64 keys of K and V (8 KiB into each
  // column block: 64 rows of 128 bytes, a whole number of the swizzle's 8-row periods).
  const auto k_addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(k_tile));
  const auto v_addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(v_tile));
  const std::uint32_t k_rows = k_addr + group * 64 * 64 * sizeof(T), v_rows = v_addr + group * 64 * 64 * sizeof(T);
  const auto ds_addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(ds_tile));
  const int key_row0 = 64 * group + 16 * (warp % 4);  // the warp's first key of the block's Bc
  const int offset = a.seq_k - a.seq_q;                // bottom-right causal mask: key ≤ query + offset

  float dv[ND][4] = {}, dk[ND][4] = {};
  float* dq_accum = a.dq_accum + static_cast<std::int64_t>(head) * a.seq_q * D;
  if (count > 0) barrier_wait(kv_full, 0);

  for (int n = 0; n < count; ++n) {
    const int s = n % C::kStages, i = tiles.begin + n, q0 = i * Br;
    // Stage s ^ 1 was freed by the block barrier that ended tile n − 1.
    if (threadIdx.x == 0 && n + 1 < count) load_qdo(n + 1);
    barrier_wait(&qdo_full[s], static_cast<std::uint32_t>((n / C::kStages) & 1));  // Q_i, dO_i landed
    const auto q_addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(q_tile(s)));
    const auto do_addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(do_tile(s)));

    // Sᵀ = K·Q_iᵀ and dPᵀ = V·dO_iᵀ: two groups of D/16 wgmmas, issued back to back.
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

    // Pᵀ from Sᵀ while dPᵀ is still running. Element (e) of 8-query block j: key key_row0 + g
    // (+8 for e ≥ 2), query q0 + 8j + 2t (+1 for odd e). Padded and keyless rows have LSE·log2e =
    // +inf, so P = 0 there; keys past Nk and above the causal diagonal are masked here.
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
      for (int e = 0; e < 4; ++e) dpt[j][e] = st[j][e] * (dpt[j][e] - ((e & 1) ? d.y : d.x));  // dSᵀ
    }

    // dV += Pᵀ·dO_i and dK += dSᵀ·Q_i, A from registers (the C→A identity: two 8-query blocks
    // are one 16-wide k-step), B MN-major: one group.
    std::uint32_t pa[Br / 16][4], dsa[Br / 16][4];
    pack_accumulator_as_a<T>(pa, st);
    pack_accumulator_as_a<T>(dsa, dpt);
    // dS into shared memory, transposed (holes/ds_transpose.cuh): the thread's element (key, query)
    // of dSᵀ goes to row `query`, column `key` of the [Br][Bc] tile, the 16-bit value that dK's A
    // operand holds (the same rounding in dK and dQ). Stored before dV and dK are issued: a wgmma's
    // A registers may not be read while it runs.
    store_ds_transposed<typename C::DsTile>(dsa, ds_tile, key_row0, g, t);
    wgmma_fence();  // pa, dsa written by ordinary instructions
#pragma unroll
    for (int ks = 0; ks < Br / 16; ++ks) wgmma_rs<T, 1>(dv, pa[ks], mn_major_step<T>(do_addr, ks, Br), 1);
#pragma unroll
    for (int ks = 0; ks < Br / 16; ++ks) wgmma_rs<T, 1>(dk, dsa[ks], mn_major_step<T>(q_addr, ks, Br), 1);
    wgmma_commit();

    cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);  // dS's stores, visible to the tensor cores
    __syncthreads();  // every warpgroup's keys of dS stored (while dV and dK run)
    // dV and dK done before dQ is issued: a warpgroup's wgmmas run in order anyway, and pa and dsa,
    // kept live until here (the compiler must not give their registers to other values while the
    // wgmmas may still read them), are free for dQ's accumulator.
    wgmma_wait<0>();
    fence_accumulators(dv);
    fence_accumulators(dk);
    fence_operands(pa);
    fence_operands(dsa);

    // dQ_i += dS·K, 64 columns of D at a time (N = 64), the accumulator reused per column block.
    // Warp w's rows of the product are queries 16(w mod 4) .. + 15 of the tile.
    constexpr int kBlocksD = D / 64, kSteps = C::kDqSplitsKeys ? 4 : Bc / 16;  // k-steps of 16 keys
    const int step0 = C::kDqSplitsKeys ? 4 * group : 0;  // this warpgroup's keys, or all of them
    const int block_first = C::kDqSplitsKeys ? 0 : group, block_stride = C::kDqSplitsKeys ? 1 : C::kGroups;
    for (int cb = block_first; cb < kBlocksD; cb += block_stride) {
      float dq[8][4];
      const std::uint32_t k_block = k_addr + cb * Bc * 64 * sizeof(T);  // column block cb of K
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kSteps; ++ks)
        wgmma_ss<T, 1>(dq, k_major_step<T>(ds_addr, step0 + ks, Br), mn_major_step<T>(k_block, step0 + ks, Bc),
                       ks > 0);
      wgmma_commit();
      wgmma_wait<0>();
      fence_accumulators(dq);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int query = q0 + 16 * (warp % 4) + g + 8 * h;
        if (query < a.seq_q)
#pragma unroll
          for (int jd = 0; jd < 8; ++jd)
            bwd::add_to_dq(dq_accum + static_cast<std::int64_t>(query) * D + cb * 64 + 8 * jd + 2 * t,
                           dq[jd][2 * h], dq[jd][2 * h + 1]);
      }
    }
    __syncthreads();  // every warpgroup done with stage s and with dS
  }

  // dK = τ·dSᵀQ, dV: this warp's 16 keys, two neighbouring columns per store.
  const std::int64_t first = static_cast<std::int64_t>(head) * a.seq_k;
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
