// v1_wgmma.cuh — rung 1 of stage 10's ladder: stage 08's backward with Hopper's data movement and
// tensor-core instruction. A block owns a tile of Bc keys (K and V stay in shared memory) and
// walks the query tiles that see them; Q and dO arrive by TMA (fa/cuda/hopper/tma.cuh), two
// buffers deep, and all five products are wgmma (fa/cuda/hopper/wgmma.cuh). Every warp still does
// everything (one thread issues the copies, all threads compute, block barriers between the
// steps): warp specialization, a dQ warp and the overlaps come in the next rungs.
//
// What changed from stage 08 (steps/08_tensor_core_backward/backward_tc_kernel.cuh):
//   - a warpgroup (128 threads) owns 64 keys and issues one wgmma per 16-wide k-step for all of
//     them, where each warp issued mma.sync per 16 × 8 block; no ldmatrix: K, V, Q, dO and dS are
//     read by the tensor cores from shared memory by descriptor (smem_descriptor.cuh);
//   - Sᵀ and dPᵀ are still computed transposed (keys are the rows, as in stage 08), so that Pᵀ and
//     dSᵀ are born in the accumulator layout whose C→A identity makes them the register A operands
//     of dV += Pᵀ·dO and dK += dSᵀ·Q; dO and Q are then the MN-major B operands (d runs along their
//     rows), as V is in stage 09's O += P·V;
//   - dQ += dS·K needs dS, not dSᵀ, as its A operand: each thread stores its dSᵀ elements
//     transposed, one 16-bit store each, into a [Br queries][Bc keys] tile in the 128-byte swizzle
//     (K-major for the product), fenced into the async proxy; K is the MN-major B operand;
//   - the copies: one thread asks the TMA for K and V once, and for Q_i and dO_i per query tile,
//     two buffers deep (tile i + 1 lands while tile i computes); rows past Nq or Nk arrive as
//     zeros; LSE·log2e and D = rowsum(dO∘O) are read from global memory (L1) by each thread;
//   - the rest is stage 08's, shared through common/ (fa/cuda/backward/): the preprocessing kernel
//     (D, LSE·log2e, padded rows at +inf), query_tiles (causal tiles skipped, the mask only where
//     needed), dQ by float atomics into a float32 accumulator, the conversion kernel (frame.cuh).
//
//   block: kGroups warpgroups, Bc = 64·kGroups keys; warpgroup w owns keys [64w, 64w + 64)
//   per query tile i of Br = 64 queries (buffer b = i mod 2):
//     wait full[b]                                  (Q_i, dO_i landed)
//     Sᵀ  = K_w·Q_iᵀ    wgmma m64n64k16, D/16 steps    A: K (shared, K-major)  B: Q_i (shared, K-major)
//     dPᵀ = V_w·dO_iᵀ   wgmma m64n64k16, D/16 steps    A: V                     B: dO_i
//     Pᵀ = exp2(Sᵀ·τlog2e − LSE·log2e), masked; dSᵀ = Pᵀ∘(dPᵀ − D)      (registers)
//     dS → shared (transposed, 16-bit stores)
//     dV += Pᵀ·dO_i     wgmma m64nDk16, Br/16 steps    A: Pᵀ (registers)        B: dO_i (shared, MN-major)
//     dK += dSᵀ·Q_i     wgmma m64nDk16, Br/16 steps    A: dSᵀ (registers)       B: Q_i (shared, MN-major)
//     fence.proxy.async; block barrier (under dV and dK); wait for dV and dK
//     dQ_i += dS·K      wgmma m64n64k16 per 64 columns of D, Bc/16 steps (or this warpgroup's 4 when
//                       D/64 < kGroups: then both warpgroups add their keys' share), float2 atomics
//     block barrier; one thread loads Q_{i+2}, dO_{i+2} into buffer b at the next tile's start
//
// Shapes: D = 64 and 128, Bc = 128 (two warpgroups, 256 threads, one block per SM). At D = 64 the
// dQ product has one 64-column block, so each warpgroup adds its own 64 keys' share: twice the
// atomics of D = 128 per query row.
//
// Prediction, written before the first run (none has run yet): at the paper shapes (bf16, N = 4k
// and 16k) 1.0-1.3× stage 08, which measured 250-312 TFLOP/s there (docs/results/
// compare_08_h100.json), so 250-400 TFLOP/s. Why: the products move from mma.sync to wgmma, whose
// specified dense rate on the H100 SXM is 989 TFLOP/s and which stage 09's first rung, with the
// same block-barrier structure, turned into 1.08-1.55× stage 07's forward; but the backward has
// five products in a chain per query tile with a wait after each step, dS's transposed 16-bit
// stores (32 per thread per tile, with bank conflicts), a block barrier before dQ and the dQ
// atomics (D·Br per tile at D = 128, twice that at D = 64), none of which overlaps the tensor
// cores here. D = 64 is predicted at the low end (the atomics and the barriers
// weigh more per FLOP); causal like non-causal (the skipped tiles are stage 08's).
//
// Measured (one H200, bf16, the same shapes, median of 20, docs/results/step10_v1_h200/): D = 128
// 332 / 332 TFLOP/s at 4k / 16k (1.14× / 1.08× stage 08 in the same run), causal 304 / 364
// (1.11× / 1.18×): inside the prediction. D = 64 206 / 221, causal 194 / 220: 0.76-0.78× stage 08,
// below it; the header's reasons (twice the atomics, the barriers and waits per FLOP) are the
// candidates, not yet measured apart.
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
struct WgmmaBackwardConfig {
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
  // K, V, then kStages × (Q, dO), dS, then the mbarriers (K/V's and one per stage); +1024 to align.
  static constexpr int kSmemBytes = 2 * kKVBytes + 2 * kStages * kQBytes + kDsBytes + 8 * (1 + kStages) + 1024;
  // Every tile starts 1024-byte aligned (the swizzle's period) if each size is a multiple of it.
  static_assert(bwd::kRowPadding % kBr == 0, "the per-row arrays are padded to whole query tiles");
  static_assert(kKVBytes % 1024 == 0 && kQBytes % 1024 == 0 && kDsBytes % 1024 == 0, "tiles: 1024-byte multiples");
};

template <class T, class C>
__global__ void __launch_bounds__(C::kThreads, 1)
    backward_wgmma_kernel(const __grid_constant__ BackwardMaps maps, const bwd::BackwardArgs<T> a) {
  constexpr int D = C::D, Br = C::kBr, Bc = C::kBc, NQ = Br / 8, ND = D / 8;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (__cvta_generic_to_shared(smem_raw) & 1023)) & 1023);
  T* k_tile = reinterpret_cast<T*>(smem);
  T* v_tile = reinterpret_cast<T*>(smem + C::kKVBytes);
  T* qdo_tiles = reinterpret_cast<T*>(smem + 2 * C::kKVBytes);  // stage s: Q at 2s, dO at 2s + 1
  auto q_tile = [&](int s) { return qdo_tiles + (2 * s) * C::QTile::kElements; };
  auto do_tile = [&](int s) { return qdo_tiles + (2 * s + 1) * C::QTile::kElements; };
  T* ds_tile = reinterpret_cast<T*>(smem + 2 * C::kKVBytes + 2 * C::kStages * C::kQBytes);
  std::uint64_t* kv_full =
      reinterpret_cast<std::uint64_t*>(smem + 2 * C::kKVBytes + 2 * C::kStages * C::kQBytes + C::kDsBytes);
  std::uint64_t* qdo_full = kv_full + 1;  // [kStages]

  const int warp = threadIdx.x / 32, group = warp / 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int head = static_cast<int>(blockIdx.y), j0 = static_cast<int>(blockIdx.x) * Bc;
  const bwd::QueryTiles tiles = bwd::query_tiles(j0, Bc, Br, a.seq_q, a.seq_k, a.causal);
  const int count = tiles.end - tiles.begin;

  // One thread asks for query tile tiles.begin + n (Q and dO) into stage n mod 2.
  auto load_qdo = [&](int n) {
    const int s = n % C::kStages;
    barrier_expect_bytes(&qdo_full[s], 2 * tile_bytes<T, Br, D>());
    load_tile_tma<T, Br, D>(q_tile(s), &maps.q, (tiles.begin + n) * Br, head, &qdo_full[s]);
    load_tile_tma<T, Br, D>(do_tile(s), &maps.d_o, (tiles.begin + n) * Br, head, &qdo_full[s]);
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
  const float* lse2 = a.lse2 + static_cast<std::int64_t>(head) * a.seq_q_padded;
  const float* delta = a.delta + static_cast<std::int64_t>(head) * a.seq_q_padded;
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
      const float2 l2 = *reinterpret_cast<const float2*>(lse2 + q0 + 8 * j + 2 * t);
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
      const float2 d = *reinterpret_cast<const float2*>(delta + q0 + 8 * j + 2 * t);
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
