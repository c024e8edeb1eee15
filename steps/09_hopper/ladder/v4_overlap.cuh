// v4_overlap.cuh — rung 4 of stage 09's ladder: FlashAttention-3's second schedule, within a
// warpgroup: its softmax of tile j runs while its own product with V_{j-1} is still in flight
// (intra-warpgroup overlap), on top of the ping-pong between warpgroups.
//
// What changed from v3_pingpong.cuh (diff the two files; everything else is the same code):
//   - S_j is committed before P_{j-1}·V_{j-1}, so `wgmma_wait<1>` returns when S_j is done and the
//     softmax starts while P·V still runs; O is rescaled and P_j packed only after `wgmma_wait<0>`
//     (P·V writes O and reads the P registers until then).
//
// What v3 added over v2_warp_specialized.cuh, kept here:
//   - the order of the products: a warpgroup's turn j issues S_j = Q·K_jᵀ and
//     O += P_{j-1}·V_{j-1} together, then does the softmax of S_j. There are count + 1 turns: the
//     first has no P·V, the last no S (both peeled out of the loop).
//   - ping-pong: the turns of the consumers alternate on named barriers (bar.sync / bar.arrive,
//     warp_roles.cuh): consumer c waits on barrier kTurnBarrier + c before issuing, and arrives on
//     the next one's barrier after. While one warpgroup's wgmma run, the other does its
//     exponentials: the tensor cores and the multi-function units (exp2) work at the same time,
//     where in the second rung both warpgroups tended to reach the softmax together.
//   - three K/V stages (a stage is released a turn later); at D = 64 three consumer warpgroups,
//     whose turns go round (0, 1, 2, 0, ..: barrier c waits, c + 1 is told), so that two of them
//     can be in their softmax while the third is on the tensor cores (hopper.cu).
//
// Predicted before its first run: none written. Measured (one run of the first four rungs at the
// paper shapes, chapter 09): 1.01-1.02× pingpong. Limit, measured: in the SASS ptxas moves the wait
// for P·V above the exponentials, so the overlap happens less than the source says. This is the
// stage's fastest kernel for a grid launch, the one later stages run (fastest_forward).
//
// Two policies say which K/V head a query head reads (Heads) and which rows a block's sequence
// holds (Rows; fa/cuda/policies/). This stage launches the dense ones, which compile to nothing;
// stage 12 passes grouped heads and packed batches of variable lengths (the grid's z the sequence,
// a block running its sequence as a problem of its own) to this kernel, with no change to the loop.
//
//   consumer 0:  [PV₋ S₀]  softmax₀ ·········· [PV₀ S₁]  softmax₁ ·········· [PV₁ S₂] ...
//   consumer 1:  ········· [PV₋ S₀]  softmax₀  ·········· [PV₀ S₁]  softmax₁ ·········· ...
//                └ turn ┘ (tensor cores)          softmax_j starts when S_j is done
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fa/cuda/tc/fragment_softmax.cuh"
#include "fa/cuda/tc/tile_ops.cuh"
#include "09_hopper/ladder/v3_pingpong.cuh"  // kTurnBarrier, and through v2: WsShared, produce_tiles, issue_*
#include "fa/cuda/hopper/warp_roles.cuh"
#include "fa/cuda/hopper/wgmma.cuh"
#include "fa/cuda/policies/heads.cuh"
#include "fa/cuda/policies/rows.cuh"

namespace fa::step09 {
using namespace hopper;  // TMA, wgmma and warp-role wrappers (common/cuda/include/fa/cuda/hopper/)

// A consumer warpgroup's work on one query tile: rows [64·c, 64·c + 64) of the block's Br, from
// Q's arrival to O written at row `out_row` of O and LSE (the head's first row). `it0`: the K/V tiles the block consumed before this tile, `q_round`:
// the query tiles before it (both 0 here; the persistent rung, v5_persistent.cuh, runs several
// tiles a block, its stages and phases running on). kReleaseQ: arrive on `q_empty` once
// every S of the tile is done, so that the producer may bring the next tile's Q.
template <class T, class C, bool kReleaseQ = false>
__device__ __forceinline__ void consume_tile_overlap(const WsShared<T, C>& sh, const KernelArgs<T>& a, int i0,
                                                     std::int64_t out_row, const tc::KeyTiles& kv, int it0 = 0,
                                                     int q_round = 0, std::uint64_t* q_empty = nullptr) {
  static_assert(C::kConsumers >= 2, "ping-pong: the consumer warpgroups take turns");
  constexpr int D = C::D, Bc = C::kBc, S = C::kStages, NT = Bc / 8, DT = D / 8;
  constexpr int K = C::kConsumers, kLast = K - 1;
  constexpr int kPair = 256;  // a named barrier joins two consumers: the one whose turn it is, the one before
  const int consumer = threadIdx.x / 128 - 1, warp = threadIdx.x / 32 % 4;
  const auto q_rows =
      static_cast<std::uint32_t>(__cvta_generic_to_shared(sh.q_tile)) + consumer * 64 * 64 * sizeof(T);
  const int warp_row0 = 64 * consumer + 16 * warp;
  // The turns go 0, 1, .., K − 1, 0, 1, ..: consumer c waits on its own barrier, then passes the
  // turn on to c + 1 (with two consumers, to each other).
  const int my_turn = kTurnBarrier + consumer, their_turn = kTurnBarrier + (consumer + 1) % K;

  float o[1][DT][4] = {};
  float m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {};
  std::uint32_t pa[Bc / 16][4];  // P_{j-1}, 16-bit, read by the next turn's P·V
  float sc[1][NT][4];            // S_j, then P_j in fp32
  float alpha[2];
  // The masks and the online softmax of tile j, in place: stage 07's functions.
  const auto softmax = [&](int j) {
    fence_accumulators(sc[0]);
    if (j >= kv.mask_from) tc::mask_scores(sc, i0 + warp_row0, j * Bc, a.seq_q, a.seq_k, a.causal);
    tc::online_softmax(sc[0], m[0], l[0], alpha, a.scale_log2);
    // Keeps the exponentials above the next wgmma_wait<0> in the PTX (they depend on no memory, so
    // the compiler could sink them). ptxas may still move the wait up in the SASS: chapter 09.
    fence_accumulators(sc[0]);
    asm volatile("" : "+f"(l[0][0]), "+f"(l[0][1]), "+f"(alpha[0]), "+f"(alpha[1])::"memory");
  };
  // P_{j-1}·V_{j-1} is done: O is final for that tile, the P registers are free, the stage empty.
  // `it`: the block's running count of K/V tiles (the stage and its phase).
  const auto values_done = [&](int it) {
    wgmma_wait<0>();
    fence_accumulators(o[0]);
    if (threadIdx.x % 128 == 0) barrier_arrive(&sh.kv_empty[it % S]);  // K and V of that tile read
  };

  // The turns: 0 issues S_0 alone, 1 .. count − 1 issue S_j with P_{j-1}·V_{j-1}, the last
  // P·V alone. Peeled, so that no wgmma sits under a condition (ptxas would serialize them all).
  if (kv.count > 0) {
    barrier_wait(sh.q_full, static_cast<std::uint32_t>(q_round & 1));
    if (consumer == kLast) named_barrier_arrive(their_turn, kPair);  // consumer 0 goes first

    barrier_wait(&sh.k_full[it0 % S], stage_phase<S>(it0));
    named_barrier_sync(my_turn, kPair);  // the warpgroup before has issued its turn
    wgmma_fence();
    issue_scores<T, C>(sc[0], q_rows, sh.k_addr(it0 % S));
    wgmma_commit();
    named_barrier_arrive(their_turn, kPair);  // the next one's turn
    wgmma_wait<0>();
    softmax(0);
    tc::rescale(o[0], alpha);
    pack_accumulator_as_a<T>(pa, sc[0]);

    for (int j = 1; j < kv.count; ++j) {
      const int it = it0 + j, s = it % S, s_prev = (it - 1) % S;
      barrier_wait(&sh.k_full[s], stage_phase<S>(it));            // K_j landed
      barrier_wait(&sh.v_full[s_prev], stage_phase<S>(it - 1));   // V_{j-1} landed
      named_barrier_sync(my_turn, kPair);
      wgmma_fence();
      issue_scores<T, C>(sc[0], q_rows, sh.k_addr(s));
      wgmma_commit();
      issue_values<T, C>(o[0], pa, sh.v_addr(s_prev));
      wgmma_commit();
      named_barrier_arrive(their_turn, kPair);
      wgmma_wait<1>();  // S_j done; P_{j-1}·V_{j-1} may still run
      softmax(j);
      values_done(it - 1);
      tc::rescale(o[0], alpha);
      pack_accumulator_as_a<T>(pa, sc[0]);
    }
    // Every S of the tile is done: Q is no longer read.
    if constexpr (kReleaseQ)
      if (threadIdx.x % 128 == 0) barrier_arrive(q_empty);

    const int last = it0 + kv.count - 1;
    barrier_wait(&sh.v_full[last % S], stage_phase<S>(last));
    named_barrier_sync(my_turn, kPair);
    wgmma_fence();
    issue_values<T, C>(o[0], pa, sh.v_addr(last % S));
    wgmma_commit();
    if (consumer != kLast) named_barrier_arrive(their_turn, kPair);  // the very last turn passes on to no one
    values_done(last);
  }

  tc::write_output(a, o, m, l, a.o + out_row * D, a.lse + out_row, i0 + warp_row0);
}

template <class T, class C, class Heads = policies::SameHeads, class Rows = policies::DenseRows>
__global__ void __launch_bounds__(C::kThreads, 1)
    flash_overlap_kernel(const __grid_constant__ TileMaps maps, const KernelArgs<T> launch, const Heads heads,
                          const Rows rows) {
  extern __shared__ unsigned char smem_raw[];
  const WsShared<T, C> sh(smem_raw);

  // The block's sequence (Rows): dense, the launch's lengths from row 0; packed, the sequence of
  // grid z, a problem of its own, whose blocks past its last query tile have nothing to do (the
  // whole block returns, before any barrier).
  const policies::SequenceRows seq = rows.sequence(launch.seq_q, launch.seq_k);
  KernelArgs<T> a = launch;
  a.seq_q = seq.seq_q;
  a.seq_k = seq.seq_k;
  const BlockWork work = block_work(a.heavy_first);
  const int i0 = work.tile * C::kBr;
  if (Rows::past_end(i0, seq)) return;
  const tc::KeyTiles kv = tc::key_tiles(i0, C::kBr, C::kBc, a.seq_q, a.seq_k, a.causal);

  if (threadIdx.x == 0) sh.init_barriers();
  __syncthreads();

  if (threadIdx.x / 128 == 0) {  // the producer: unchanged
    release_registers<C::kProducerRegisters>();
    if (threadIdx.x == 0 && kv.count > 0)
      produce_tiles(sh, maps, i0, work.head, heads.kv_head(work.head), kv.count, seq.first);
    return;
  }
  take_registers<C::kConsumerRegisters>();
  consume_tile_overlap<T, C>(sh, a, i0, static_cast<std::int64_t>(work.head) * seq.head_rows + seq.first, kv);
}

}  // namespace fa::step09
