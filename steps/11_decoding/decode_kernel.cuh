// decode_kernel.cuh — stage 11's split-KV decoding kernel (flash-decoding): a few query rows against
// a long key/value cache, the keys cut into `splits` chunks that separate blocks read at once.
//
// What changed from stage 07 (steps/07_tensor_cores/flash_tc_kernel.cuh), which gives every block
// 128 query rows and all the keys: in decoding a head has 1 to 16 query rows, so a grid of one
// block per (batch, head) is a handful of blocks on a GPU of 132 SMs, each streaming the whole
// cache alone. Three changes fix the shape of the work, none the arithmetic:
//
//   1. Grouped heads share a tile. The G = Hq / Hkv query heads that read one K/V head are rows of
//      one Q tile: rows r = g·Nq + i (head g of the group, position i), contiguous in [B, Hq, Nq, D],
//      so the tile is one plain copy. K and V are read once per group, not once per query head.
//      A tile is 16 rows (one mma.sync's M): a group of 4 heads at Nq = 1 fills 4 of them; the tensor
//      cores idle, but the kernel waits on memory anyway (docs/11_decoding.md, the roofline).
//   2. The keys are split across blocks: grid (B·Hkv, splits, row tiles). Block s reads key tiles
//      [s·T, (s+1)·T) and writes a partial result, the course's (O_s, LSE_s) pair for its keys
//      (split_merge.hpp), merged afterwards (below). One split writes O and LSE directly, and
//      there is nothing to merge.
//   3. Within a block the warps split the keys again: each warp owns the same 16 rows and takes every
//      kWarps-th key tile of the block's chunk, with its own K/V buffers and cp.async pipeline
//      (no __syncthreads in the loop, only __syncwarp). At the end the warps' (m, l, Õ) are merged in
//      shared memory by the same rule as the splits, in base 2 (the cluster merge skips this step:
//      there each warp is a part of its own).
//
//   The merge of the splits is a ladder (ladder/, the four values of inference.cuh's Merge):
//     v1_warp_per_row, v2_block_per_row: a second kernel reads the partials from global memory
//       (a warp per row, then a block per row: v2's merge_block_per_row_kernel);
//     v3_last_block: no second kernel: each block counts itself done on its row tile's counter, and
//       the block that counts last merges the tile's rows over every split (its merge_tile_splits);
//     this file, the last rung, the cluster merge (Hopper): no second kernel and no partials in
//       global memory: the splits of a row tile are one thread-block cluster, and every warp sends
//       its part of the result into the shared memory of the blocks that merge it (open_inbox,
//       send_to_owners, merge_inbox). The stage runs each lower merge from its own rung, and this
//       kernel for the cluster merge and, below compute capability 9.0, with v2's merge kernel
//       (v2_block_per_row::merge_block_per_row_kernel) for Merge::fastest.
//     Predicted before the cluster merge was run: faster than v3, the partials never leaving the
//     chip; no figure was written down. Measured (one H100, B = 1, 32 query heads on 8 K/V heads,
//     one query, D = 128, bf16, docs/results/compare_11_decode_h100.json, the same run as the lower
//     rungs'): 18.2 / 28.8 / 50.4 / 178.5 µs at 8k / 16k / 32k / 128k keys, 2.8-7.6 µs off v3's.
//   A paged cache (block_table): K and V rows come from pool pages named by a block table, as serving
//   engines keep their caches; only the address of a key tile's first row changes (kv_row below).
//
//   per warp, per key tile j (Bc keys):       the loop of stage 07 for one 16-row slice
//     S = Q·K_jᵀ (Q's fragments stay in registers), mask (tail of the cache, causal rows),
//     online softmax (07/fragment_softmax.cuh), O += P·V_j; tile j + kStages·kWarps is copied into
//     the freed buffer.
//
// Causal: row r is query position i = r mod Nq, the last Nq positions of its cache: it sees keys
// j <= i + Nk − Nq (the course's bottom-right mask).
//
// A step among steps (programmatic dependent launch, grid_dependency.cuh): launched with
// DecodeOptions::overlap_previous, the kernel may start while the kernel before it in the stream still
// runs. In a model that kernel wrote this step's Q and the newest Nq keys of the cache (and any cache
// lengths or block table), never the older keys. So each warp copies its first tiles before it waits
// for the previous grid when they hold only older keys of a plain cache, and everything else after.
// It never calls allow_next_grid(): a block that exits counts as one that allowed it, so the next
// step's blocks start as this step's blocks leave, on the SMs they leave (allowed earlier, they crowd
// this step's clusters: docs/11_decoding.md, "A step among steps"; the runs, docs/notes/11_decoding.md).
// Launched without the attribute, the wait returns at once and the kernel is what it was.
#pragma once

#include <cuda/ptx>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "11_decoding/decode_args.cuh"
#include <split_merge.hpp>  // the hole of exercise ex11 (holes/)
#include "fa/cuda/tc/fragment_softmax.cuh"
#include "fa/cuda/tc/tile_ops.cuh"
#include "fa/cuda/ptx/cp_async.cuh"
#include "fa/cuda/ptx/ldmatrix.cuh"
#include "fa/cuda/ptx/mma.cuh"

namespace fa::step11 {

// The cluster merge's inbox holds what any cluster sends it, for every count of splits (2 to
// kMaxClusterSplits) and of a tile's rows (1 to 16): W·splits sources, each ⌈pairs / splits⌉ slots
// of 8 floats; and the bytes a block waits for stay below an mbarrier's transaction count (2^20).
template <class C>
constexpr bool inbox_holds_every_cluster() {
  for (int splits = 2; splits <= C::kMaxClusterSplits; ++splits)
    for (int rows = 1; rows <= C::kRows; ++rows) {
      const int pairs = rows * (C::D / 8), slots = (pairs + splits - 1) / splits, sources = C::kWarps * splits;
      if (sources * slots * 8 > C::kInboxFloats || sources * rows > C::kInboxLseFloats) return false;
      if (sources * (rows + 8 * slots) * 4 >= (1 << 20)) return false;
    }
  return true;
}

// Merge::cluster: the splits of a row tile are the blocks of one thread-block cluster (rank s =
// split s, cluster (1, splits, 1) on a grid whose y is the splits), and the partial results never
// leave the chip. Every warp of every split is a part of its own, (O_w, LSE_w) for its keys, and
// sends it straight to the blocks that merge it; there is no merge of the warps within a block
// first, and no block waits for the others at a barrier:
//   1. at its start each block readies its inbox: an mbarrier that expects the bytes every source
//      will send it, then a cluster barrier's arrive (its wait, before the first send, only makes
//      sure every block's mbarrier exists; by then every block has long arrived);
//   2. after its keys each warp sends its pieces with st.async: 8 bytes to the owner's inbox, the
//      owner's mbarrier counting them (a pair (row, 8-column group) of the row tile belongs to
//      block pair mod splits), and its rows' LSE_w to every block;
//   3. each block waits on its own mbarrier until every source's bytes have landed, merges its pairs
//      by split_merge.hpp's rule over the W·splits parts, and writes them to O (and LSE);
//   4. before it exits, a cluster barrier: every block's sends have been issued, so no block leaves
//      with a store to another still unissued (an inbox is written only while its block waits for
//      it). Left out, and with the first wait moved to the kernel's start, the step ran within
//      0.1 µs of this on an H100: the barriers cost nothing here, so they stay where they are plainest.
// The first version (docs/11_decoding.md) merged the warps in each block, wrote (O_s, LSE_s) to
// its shared memory, and after a cluster barrier each block read every split's rows through
// distributed shared memory, with a second barrier before exiting: 1.1-1.3 µs slower per step at
// 8k-32k keys on an H100 (docs/results/step11_push_h100/ab_runs.txt).
// Compiled for compute capability 9.0 only; the host never launches a cluster below it.
template <class C>
struct Inbox {
  std::uint64_t* bytes;  // the mbarrier: one arrival (the block's own) plus every byte sent here
  float* o;              // [source][slot][8]: source = split·W + warp, slot = pair / splits
  float* lse;            // [source][16]: LSE_w of each row, in base 2; the merge overwrites it with
                         // the sources' weights
  __device__ explicit Inbox(unsigned char* smem) {
    unsigned char* at = smem + C::QTile::kElements * 2 + C::kWarps * C::kWarpBytes;
    bytes = reinterpret_cast<std::uint64_t*>(at);
    o = reinterpret_cast<float*>(at + 8);
    lse = o + C::kInboxFloats;
  }
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// The address of `local` (this block's shared memory) in block `rank` of the cluster.
__device__ __forceinline__ std::uint32_t in_rank(const void* local, int rank) {
  std::uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote)
               : "r"(static_cast<std::uint32_t>(__cvta_generic_to_shared(local))), "r"(rank));
  return remote;
}
// st.async: store to another block's shared memory, completing `bytes` on its mbarrier there.
// (CCCL's cuda::ptx::st_async takes generic pointers; these take the mapped addresses.)
__device__ __forceinline__ void send(std::uint32_t to, float x, std::uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];" ::"r"(to), "f"(x), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void send(std::uint32_t to, float x, float y, std::uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];" ::"r"(to), "f"(x),
               "f"(y), "r"(bar)
               : "memory");
}
#endif

// How many of a tile's `pairs` (row, 8-column group) pairs block `split` owns: pairs split,
// split + splits, ... (each source sends them to that block's inbox in this order, one slot each).
__device__ __forceinline__ int owned_pairs(int pairs, int split, int splits) { return (pairs - split + splits - 1) / splits; }

// 1. One thread: the mbarrier, and the bytes it waits for (every source's LSE_w of each row, and
// its 8 floats of each owned pair). Then every thread arrives on the cluster barrier.
template <class C>
__device__ __forceinline__ void open_inbox(const Inbox<C>& inbox, int split, int splits, int rows_here) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (threadIdx.x == 0) {
    const int owned = owned_pairs(rows_here * (C::D / 8), split, splits), sources = splits * C::kWarps;
    cuda::ptx::mbarrier_init(inbox.bytes, 1);
    cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta, cuda::ptx::space_shared,
                                         inbox.bytes, static_cast<std::uint32_t>(sources * (rows_here + 8 * owned) * 4));
    cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster);  // seen by the cluster
  }
  cuda::ptx::barrier_cluster_arrive(cuda::ptx::sem_relaxed);
#else
  (void)inbox, (void)split, (void)splits, (void)rows_here;
  __trap();
#endif
}

// 2. A warp's (m, l, Õ) of its rows g and g + 8 (stage 07's fragments) as (O_w, LSE_w), sent. LSE_w
// travels in base 2 (m·τlog2e + log2 l), as the warps' own online softmax keeps it, so that the
// merge needs only the hardware's ex2 and lg2 (MUFU), no expf or logf.
template <class C>
__device__ __forceinline__ void send_to_owners(const Inbox<C>& inbox, const float (&o)[C::D / 8][4], const float (&m)[2],
                                               const float (&l)[2], float scale_log2, int split, int splits,
                                               int rows_here) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int DT = C::D / 8;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, source = split * C::kWarps + threadIdx.x / 32;
  const int slots = (rows_here * DT + splits - 1) / splits;
  float lse2[2], inv_l[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l_row = tc::group_sum(l[r]);
    lse2[r] = l_row > 0.0f ? fmaf(m[r], scale_log2, __log2f(l_row)) : -INFINITY;  // a warp without keys weighs 0
    inv_l[r] = l_row > 0.0f ? __frcp_rn(l_row) : 0.0f;
  }
  cuda::ptx::barrier_cluster_wait();  // every block's mbarrier is initialized
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = g + 8 * r;
    if (row >= rows_here) continue;
    int owner = row * DT % splits, slot = row * DT / splits;  // of pair (row, 0); then one pair further a step
#pragma unroll
    for (int dn = 0; dn < DT; ++dn) {  // lane t: columns 8·dn + 2t, 2t + 1 of the pair (row, dn)
      send(in_rank(inbox.o + (source * slots + slot) * 8 + 2 * t, owner), o[dn][2 * r] * inv_l[r],
           o[dn][2 * r + 1] * inv_l[r], in_rank(inbox.bytes, owner));
      if (++owner == splits) owner = 0, ++slot;
    }
    for (int to = t; to < splits; to += 4)  // every block weighs this source on every row
      send(in_rank(inbox.lse + source * C::kRows + row, to), lse2[r], in_rank(inbox.bytes, to));
  }
  cuda::ptx::barrier_cluster_arrive(cuda::ptx::sem_relaxed);  // 4., this block's sends issued
#else
  (void)inbox, (void)o, (void)m, (void)l, (void)scale_log2, (void)split, (void)splits, (void)rows_here;
  __trap();
#endif
}

// 3. and 4.: the block's pairs merged over every source, once the bytes are in. This is a chain of
// dependent steps on one block while the GPU waits, so it is written for latency: every load of a
// step issued before its first use, base 2 throughout, four partial sums.
template <class T, class C>
__device__ __forceinline__ void merge_inbox(const DecodeArgs<T>& a, const Inbox<C>& inbox, int split, int rows_here,
                                            std::int64_t row_base) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int DT = C::D / 8, kPerThread = C::kWarps * C::kMaxClusterSplits / 8;
  const int splits = a.splits, sources = splits * C::kWarps, pairs = rows_here * DT;
  const int slots = (pairs + splits - 1) / splits;
  while (!cuda::ptx::mbarrier_try_wait_parity(inbox.bytes, 0u)) {
  }
  {  // Each row's LSE over the sources, and each source's weight in place of its LSE_w: 8 threads a
     // row, each with up to kPerThread sources (split_merge.hpp's rule, in base 2).
    const int row = threadIdx.x / 8, j = threadIdx.x % 8;
    const bool real = row < rows_here;
    float* lse_s = inbox.lse + row;  // source s at lse_s[s · 16]
    float x[kPerThread];
    float mx = -INFINITY;
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int s = j + 8 * k;
      x[k] = real && s < sources ? lse_s[s * C::kRows] : -INFINITY;
      mx = fmaxf(mx, x[k]);
    }
#pragma unroll
    for (int offset = 4; offset > 0; offset /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, offset));
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) sum += mx == -INFINITY ? 0.0f : ptx::ex2(x[k] - mx);  // ex2(−inf) = 0
#pragma unroll
    for (int offset = 4; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    const float lse2 = mx == -INFINITY ? -INFINITY : mx + __log2f(sum);
#pragma unroll
    for (int k = 0; k < kPerThread; ++k)
      if (const int s = j + 8 * k; real && s < sources) lse_s[s * C::kRows] = lse2 == -INFINITY ? 0.0f : ptx::ex2(x[k] - lse2);
    if (real && j == 0 && row * DT % splits == split)  // by the owner of pair (row, 0), in natural log
      a.lse[row_base + row] = lse2 * static_cast<float>(M_LN2);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < owned_pairs(pairs, split, splits) * 8; i += C::kThreads) {
    const int slot = i / 8, c = i % 8, pair = split + slot * splits, row = pair / DT;
    const float* weight = inbox.lse + row;
    const float* part = inbox.o + slot * 8 + c;
    float acc[4] = {};
    for (int s = 0; s < sources; s += 4)  // sources = W·splits, a multiple of 4
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[k] += weight[(s + k) * C::kRows] * part[(s + k) * slots * 8];
    a.o[(row_base + row) * C::D + 8 * (pair % DT) + c] = static_cast<T>((acc[0] + acc[1]) + (acc[2] + acc[3]));
  }
  cuda::ptx::barrier_cluster_wait();  // 4.
#else
  (void)a, (void)inbox, (void)split, (void)rows_here, (void)row_base;
  __trap();
#endif
}

template <class T, class C>
__global__ void __launch_bounds__(C::kThreads) flash_decode_kernel(const DecodeArgs<T> a) {
  constexpr int D = C::D, Bc = C::kBc, W = C::kWarps, S = C::kStages, NT = Bc / 8, DT = D / 8;
  using QTile = typename C::QTile;
  using KVTile = typename C::KVTile;
  static_assert(inbox_holds_every_cluster<C>(), "the cluster merge's inbox must hold what any cluster sends it");
  extern __shared__ __align__(128) unsigned char smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  // A step among steps (the file's header). Cache lengths and a block table may be the previous
  // kernel's writes: with either, this grid waits before it reads them.
  const bool plain_cache = a.cache_lens == nullptr && a.block_table == nullptr;
  if (!plain_cache) wait_for_previous_grid();

  // Which rows, which keys. Blocks: x = (batch, kv head), y = the split, z = the 16-row tile.
  const int head_kv = blockIdx.x, split = blockIdx.y, r0 = blockIdx.z * C::kRows;
  const int batch = head_kv / a.heads_kv;
  const int group_rows = a.group * a.seq_q;  // R: the rows of one K/V head
  const int rows_here = min(C::kRows, group_rows - r0);
  const std::int64_t row_base = static_cast<std::int64_t>(head_kv) * group_rows + r0;  // in [B·Hq·Nq]
  const int n_keys = a.cache_lens ? a.cache_lens[batch] : a.seq_k;
  // Where key `key`'s row of this K/V head starts in K and V: [B, Hkv, Nk, D], or a paged cache's
  // pool [pages, Hkv, page_size, D] through the block table (a key tile never crosses a page).
  auto kv_row = [&](int key) -> std::int64_t {
    if (a.block_table == nullptr) return (static_cast<std::int64_t>(head_kv) * a.seq_k + key) * D;
    const int page = a.block_table[batch * a.pages_per_seq + key / a.page_size];
    return ((static_cast<std::int64_t>(page) * a.heads_kv + head_kv % a.heads_kv) * a.page_size + key % a.page_size) * D;
  };

  // Keys < seen are seen by some row of the tile, keys < full by every row (stage 05's bounds).
  int seen = n_keys, full = n_keys;
  if (a.causal) {
    int lo, hi;
    position_range(r0, rows_here, a.seq_q, lo, hi);
    seen = max(0, min(n_keys, hi + n_keys - a.seq_q + 1));
    full = max(0, min(n_keys, lo + n_keys - a.seq_q + 1));
  }
  // This block's key tiles [tile_begin, tile_end); warp w takes tile_begin + w, + W, ...
  const int tile_begin = split * a.tiles_per_split;
  const int tile_end = min(tile_begin + a.tiles_per_split, (seen + Bc - 1) / Bc);
  const int my_tiles = tile_begin + warp < tile_end ? (tile_end - tile_begin - warp + W - 1) / W : 0;
  auto tile_of = [&](int n) { return tile_begin + warp + n * W; };

  // Shared memory (32-bit shared-window addresses): Q, then each warp's K/V stages.
  const std::uint32_t q_tile = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
  const std::uint32_t my_buffers = q_tile + QTile::kElements * sizeof(T) + warp * C::kWarpBytes;
  auto load_kv = [&](int n) {  // tile n of this warp into stage n mod S: K, then V, one group
    const std::uint32_t stage = my_buffers + (n % S) * 2 * C::kTileBytes;
    const int key0 = tile_of(n) * Bc;  // < n_keys: a loaded tile holds at least one key
    const std::int64_t at = kv_row(key0);
    warp_copy_tile<KVTile, Bc, D>(stage, a.k + at, 0, n_keys - key0, lane);
    warp_copy_tile<KVTile, Bc, D>(stage + C::kTileBytes, a.v + at, 0, n_keys - key0, lane);
  };

  const Inbox<C> inbox(smem);  // Merge::cluster
  if (a.cluster_merge) open_inbox(inbox, split, a.splits, rows_here);

  // The copies, S + 1 groups per thread: Q by the whole block, and each warp's first S tiles (one
  // group each; empty groups where the warp has fewer, so that the waits in the loop count alike).
  auto load_q = [&] {
    tc::load_tile<QTile, C::kRows, D, C::kThreads, true>(reinterpret_cast<T*>(smem), a.q + row_base * D, 0,
                                                             rows_here);
    ptx::cp_async_commit();
  };
  auto load_first_tiles = [&] {
#pragma unroll
    for (int n = 0; n < S; ++n) {
      if (n < my_tiles) load_kv(n);
      ptx::cp_async_commit();
    }
  };
  // Launched alone, Q first: the first product waits for it, and for the first tile only (the loop's
  // wait), not for every tile in flight. Overlapping the previous grid, a warp whose first tiles hold
  // only keys older than the step's Nq new ones (a plain cache) copies them before it waits for that
  // grid, and Q after; then it waits for all its copies, which have had the previous grid's tail to land.
  const int first_tiles = min(S, my_tiles);
  const bool early = a.overlap_previous && plain_cache &&
                     (first_tiles == 0 || tile_of(first_tiles - 1) * Bc + Bc <= n_keys - a.seq_q);
  if (early) {
    load_first_tiles();
    wait_for_previous_grid();
    load_q();
    ptx::cp_async_wait<0>();  // the first tiles and Q have landed (this thread's copies) ...
  } else {
    if (plain_cache) wait_for_previous_grid();  // (otherwise it waited at the top)
    load_q();
    load_first_tiles();
    ptx::cp_async_wait<S>();  // Q has landed (this thread's copies) ...
  }
  __syncthreads();          // ... and every thread's

  // Q's A fragments, for all of D, once: the 16 rows never change (ldmatrix addressing: stage 07).
  const int chunk_qv = (lane / 16) ^ (lane % 8), chunk_k = (lane / 8 % 2) ^ (lane % 8);
  std::uint32_t qa[D / 16][4];
  {
    const std::uint32_t q_base = q_tile + sizeof(T) * ((lane % 16) * 64 + chunk_qv * 8);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) ptx::ldmatrix_x4(qa[kk], tc::swizzled_at<T>(q_base, kk, 0, C::kRows));
  }
  const std::uint32_t k_base = my_buffers + sizeof(T) * ((lane % 8 + 8 * (lane / 16)) * 64 + chunk_k * 8);
  const std::uint32_t v_base = my_buffers + C::kTileBytes + sizeof(T) * ((lane % 16) * 64 + chunk_qv * 8);

  // The keys each of the thread's two rows (g, g + 8) sees: the causal limit of its position, or
  // the whole cache (also for padding rows past the group's R rows: their Q is zero, their result
  // is never written).
  int limit[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = r0 + g + 8 * r;
    limit[r] = a.causal && row < group_rows ? max(0, min(n_keys, row % a.seq_q + n_keys - a.seq_q + 1)) : n_keys;
  }

  float o[DT][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  for (int n = 0; n < my_tiles; ++n) {
    const std::uint32_t stage = (n % S) * 2 * C::kTileBytes;
    const int key0 = tile_of(n) * Bc;
    ptx::cp_async_wait<S - 1>();  // tile n has landed (this lane's copies) ...
    __syncwarp();                 // ... and the warp's

    // S = Q·K_jᵀ: D/16 steps of k = 16, two 8-key column tiles per ldmatrix.
    float s[NT][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        std::uint32_t kb[4];
        ptx::ldmatrix_x4(kb, tc::swizzled_at<T>(k_base, kk, np, Bc) + stage);
        ptx::mma_m16n8k16<T>(s[2 * np], qa[kk], {kb[0], kb[1]});
        ptx::mma_m16n8k16<T>(s[2 * np + 1], qa[kk], {kb[2], kb[3]});
      }
    if (key0 + Bc > full) {  // the cache's tail, or keys some row must not see
#pragma unroll
      for (int np = 0; np < NT; ++np)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (key0 + 8 * np + 2 * t + (e & 1) >= limit[e / 2]) s[np][e] = -INFINITY;
    }

    float alpha[2];
    tc::online_softmax(s, m, l, alpha, a.scale_log2);
    tc::rescale(o, alpha);

    // O += P·V_j: P's A fragments are two S accumulators, packed to 16 bits.
#pragma unroll
    for (int ks = 0; ks < Bc / 16; ++ks) {
      const std::uint32_t pa[4] = {ptx::pack2<T>(s[2 * ks][0], s[2 * ks][1]), ptx::pack2<T>(s[2 * ks][2], s[2 * ks][3]),
                                   ptx::pack2<T>(s[2 * ks + 1][0], s[2 * ks + 1][1]),
                                   ptx::pack2<T>(s[2 * ks + 1][2], s[2 * ks + 1][3])};
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        std::uint32_t vb[4];
        ptx::ldmatrix_x4_trans(vb, tc::swizzled_at<T>(v_base, dp, ks, Bc) + stage);
        ptx::mma_m16n8k16<T>(o[2 * dp], pa, {vb[0], vb[1]});
        ptx::mma_m16n8k16<T>(o[2 * dp + 1], pa, {vb[2], vb[3]});
      }
    }
    __syncwarp();  // every lane has read this stage before it is refilled
    if (n + S < my_tiles) load_kv(n + S);
    ptx::cp_async_commit();
  }

  if (a.cluster_merge) {
    send_to_owners(inbox, o, m, l, a.scale_log2, split, a.splits, rows_here);
    merge_inbox(a, inbox, split, rows_here, row_base);
    return;
  }

  // The warps' merge. Each writes its rows' raw max m, sum l and unnormalized Õ into what were its
  // K/V buffers (every copy has landed and every warp has left its loop: the wait, the barrier).
  ptx::cp_async_wait<0>();
  __syncthreads();
  constexpr int MS = C::kMergeStride;
  float* merge_o = reinterpret_cast<float*>(smem + QTile::kElements * sizeof(T));  // [W][16][MS]
  float* merge_m = merge_o + W * C::kRows * MS;                                     // [W][16]
  float* merge_l = merge_m + W * C::kRows;                                          // [W][16]
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = g + 8 * r;
    const float l_row = tc::group_sum(l[r]);
    if (t == 0) {
      merge_m[warp * C::kRows + row] = m[r];
      merge_l[warp * C::kRows + row] = l_row;
    }
#pragma unroll
    for (int dn = 0; dn < DT; ++dn) {
      *reinterpret_cast<float2*>(merge_o + (warp * C::kRows + row) * MS + 8 * dn + 2 * t) =
          make_float2(o[dn][2 * r], o[dn][2 * r + 1]);
    }
  }
  __syncthreads();

  // Each element of the block's rows: the warps weighted by 2^(m_w·τlog2e − M·τlog2e) (M: their
  // largest max; 0 for a row no warp saw a key of), then the split's (O_s, LSE_s), or O and LSE.
  for (int e = threadIdx.x; e < rows_here * D; e += C::kThreads) {
    const int row = e / D, d = e % D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < W; ++w) M = fmaxf(M, merge_m[w * C::kRows + row]);
    const float base = M == -INFINITY ? 0.0f : M * a.scale_log2;
    float sum = 0.0f, acc = 0.0f;
#pragma unroll
    for (int w = 0; w < W; ++w) {
      const float weight = ptx::ex2(merge_m[w * C::kRows + row] * a.scale_log2 - base);
      sum += weight * merge_l[w * C::kRows + row];
      acc += weight * merge_o[(w * C::kRows + row) * MS + d];
    }
    const float out = sum > 0.0f ? acc / sum : 0.0f;
    const float lse = sum > 0.0f ? M * a.scale + logf(sum) : -INFINITY;
    const std::int64_t row_index = row_base + row;
    if (a.splits == 1) {
      a.o[row_index * D + d] = static_cast<T>(out);
      if (d == 0) a.lse[row_index] = lse;
    } else {
      const std::int64_t part = split * a.rows + row_index;
      a.o_part[part * D + d] = out;
      if (d == 0) a.lse_part[part] = lse;
    }
  }
}

}  // namespace fa::step11
