// ladder/v3_last_block.cuh — stage 11's merge ladder, rung 3: no second kernel; the last block of
// each row tile to finish merges the tile's rows (Merge::last_block, variant split_kv_fused_merge).
//
// What it adds (to v2_block_per_row.cuh): merge_tile_splits, called at the end of the split kernel.
// Each block counts itself on its row tile's counter after it wrote its partial rows; the one that
// counts last (every other split's rows written and fenced) merges them by split_merge.hpp's rule,
// every read issued before any result is needed, and sets the counter back to 0 for the next
// launch. No block waits for another. Launched without counters, the kernel is rung 2's, and rung 2's
// merge kernel stays for it.
//
// Predicted before it was run: the merge kernel's launch and its own start saved, about 4 µs a step
// at batch 1 (from rung 2's time per kernel).
// Measured (the same run as rungs 1 and 2, docs/results/compare_11_decode_h100.json): 21.0 / 31.7 /
// 54.4 / 186.1 µs at 8k / 16k / 32k / 128k keys, 1.1-1.6 µs off rung 2's: the merge now runs in the
// last block of each row tile, 8 blocks at batch 1, after an atomic and a fence, while the rest of
// the GPU waits (docs/11_decoding.md, "The merge of the splits, four ways").
//
// Next rung: the stage's kernel, decode_kernel.cuh: the splits of a row tile as one cluster.
#pragma once

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

namespace fa::step11::v3_last_block {

// One output element of merge_block_per_row_kernel: Σ_s weight[s] · part[s · stride] over the splits (split s's O_s
// element, each weighted by split_merge.hpp's part_weight), four loads in flight at a time instead
// of a chain of dependent ones. Read through L2 (__ldcg): the parts were written by other blocks.
__device__ __forceinline__ float sum_over_splits(const float* part, std::int64_t stride, const float* weight,
                                                 int splits) {
  float acc = 0.0f;
  int s = 0;
  for (; s + 4 <= splits; s += 4) {  // independent loads, then the sums
    const float x0 = __ldcg(part + (s + 0) * stride), x1 = __ldcg(part + (s + 1) * stride);
    const float x2 = __ldcg(part + (s + 2) * stride), x3 = __ldcg(part + (s + 3) * stride);
    acc += weight[s] * x0 + weight[s + 1] * x1 + weight[s + 2] * x2 + weight[s + 3] * x3;
  }
  for (; s < splits; ++s) acc += weight[s] * __ldcg(part + s * stride);
  return acc;
}

// Merge::last_block, called by every block of the split kernel after it wrote its partial rows. The
// block counts itself on its row tile's counter; the one that counts last (all the others' partials
// written and fenced) merges the tile's rows over every split by split_merge.hpp's rule, and sets the
// counter back to 0 for the next launch. The others return. No block
// waits for another, so the order in which the GPU runs them does not matter.
//   release: each thread fences its partial stores before the block counts (__threadfence, then
//            the barrier, then one atomicAdd);
//   acquire: the last block's counting thread fences after the atomic, the barrier passes that on,
//            and the partials are read through L2 (__ldcg), never from a stale L1 line.
// `scratch` is at least 16 · 128 floats of shared memory no thread still reads: the split weights.
template <class T, class C>
__device__ __forceinline__ void merge_tile_splits(const DecodeArgs<T>& a, float* scratch, std::int64_t row_base,
                                                  int rows_here, unsigned* counter) {
  constexpr int D = C::D;
  __shared__ bool merges;
  __threadfence();
  __syncthreads();  // every thread's partials fenced, and every thread done with `scratch`
  if (threadIdx.x == 0) {
    merges = atomicAdd(counter, 1u) == static_cast<unsigned>(a.splits - 1);
    if (merges) {
      __threadfence();
      *counter = 0;  // every split has counted: ready for the next launch
    }
  }
  __syncthreads();
  if (!merges) return;

  // The merge is latency, not bandwidth: a few KiB of partials, read from L2 by one block while
  // the rest of the GPU is idle. So every read is issued before any result is needed, in three
  // rounds: every split's LSE of the tile's rows at once (one load per thread and entry, into
  // `scratch` [16][splits]); then, per row, its LSE over the splits and each split's weight
  // (split_merge.hpp's rule, from shared memory, in place); then O, four columns per thread,
  // eight splits' float4 loads in flight before the first sum. (A version that summed one column
  // at a time, four loads in flight, waited on L2 about twenty times in a row: at 16 splits the
  // whole step took 1.1-2.0 µs longer on an H100, docs/11_decoding.md.)
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, splits = a.splits;
  for (int i = threadIdx.x; i < rows_here * splits; i += C::kThreads) {
    const int row = i / splits, s = i % splits;
    scratch[i] = __ldcg(a.lse_part + s * a.rows + row_base + row);
  }
  __syncthreads();
  for (int row = warp; row < rows_here; row += C::kWarps) {
    float* lse_s = scratch + row * splits;  // this row's splits: LSE_s in, weight out
    float m = -INFINITY;
    for (int s = lane; s < splits; s += 32) m = fmaxf(m, lse_s[s]);
    for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
    float sum = 0.0f;
    if (m != -INFINITY)  // no split saw a key: LSE −inf, every weight 0, O = 0
      for (int s = lane; s < splits; s += 32) sum += expf(lse_s[s] - m);
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    const float lse_row = m == -INFINITY ? -INFINITY : m + logf(sum);
    for (int s = lane; s < splits; s += 32) lse_s[s] = part_weight(lse_s[s], lse_row);  // each lane its own s
    if (lane == 0) a.lse[row_base + row] = lse_row;
  }
  __syncthreads();

  // O: thread i sums columns 4c .. 4c + 3 of one row over the splits (split s at [s · rows · D]).
  constexpr int kQuads = D / 4, kInFlight = 8;
  const std::int64_t stride = a.rows * kQuads;  // one split's partial O, in float4
  for (int i = threadIdx.x; i < rows_here * kQuads; i += C::kThreads) {
    const int row = i / kQuads, c = i % kQuads;
    const float4* part = reinterpret_cast<const float4*>(a.o_part + (row_base + row) * D) + c;
    const float* weight = scratch + row * splits;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int s0 = 0; s0 < splits; s0 += kInFlight) {
      float4 x[kInFlight];
#pragma unroll
      for (int k = 0; k < kInFlight; ++k)
        x[k] = s0 + k < splits ? __ldcg(part + (s0 + k) * stride) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int k = 0; k < kInFlight; ++k) {
        const float w = s0 + k < splits ? weight[s0 + k] : 0.0f;
        acc.x += w * x[k].x;
        acc.y += w * x[k].y;
        acc.z += w * x[k].z;
        acc.w += w * x[k].w;
      }
    }
    T* to = a.o + (row_base + row) * D + 4 * c;
    to[0] = static_cast<T>(acc.x);
    to[1] = static_cast<T>(acc.y);
    to[2] = static_cast<T>(acc.z);
    to[3] = static_cast<T>(acc.w);
  }
}

template <class T, class C>
__global__ void __launch_bounds__(C::kThreads) flash_decode_kernel(const DecodeArgs<T> a) {
  constexpr int D = C::D, Bc = C::kBc, W = C::kWarps, S = C::kStages, NT = Bc / 8, DT = D / 8;
  using QTile = typename C::QTile;
  using KVTile = typename C::KVTile;
  extern __shared__ __align__(128) unsigned char smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  // A step among steps (decode_kernel.cuh's header). Cache lengths and a block table may be the previous
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
  if (a.splits > 1 && a.tile_counters != nullptr)
    v3_last_block::merge_tile_splits<T, C>(a, merge_o, row_base, rows_here, a.tile_counters + blockIdx.x * gridDim.z + blockIdx.z);
}

// The same merge with a block of 128 threads per query row (Merge::block_per_row; 7.5-8 µs faster
// at every cache length on an H100, docs/results/compare_11_decode_merge_h100.txt). Rung 1's
// combine_kernel gives each row one warp whose lanes each walk all the splits one after the other, twice for
// the LSE and once per column: at batch 1 that is 8 blocks and a chain of dependent steps (12 µs at
// every cache length, chapter 11). Here thread s reads split s's LSE, the block reduces the max and
// the sum at once, keeps each split's weight in shared memory (split_merge.hpp's part_weight), and
// thread d sums column d over the splits with four loads in flight (sum_over_splits).
template <class T>
__global__ void __launch_bounds__(128) merge_block_per_row_kernel(const float* o_part, const float* lse_part, T* o,
                                                                  float* lse, long long rows, int splits, int dim) {
  __shared__ float weight[128];  // splits <= 128 (choose_splits' cap, --splits' range)
  __shared__ float partial[4];   // one value per warp
  const long long row = blockIdx.x;
  const int t = static_cast<int>(threadIdx.x), lane = t % 32, warp = t / 32;
  const float mine = t < splits ? lse_part[t * rows + row] : -INFINITY;

  float m = mine;  // the row's max over the splits: the warps', then the block's
  for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
  if (lane == 0) partial[warp] = m;
  __syncthreads();
  m = fmaxf(fmaxf(partial[0], partial[1]), fmaxf(partial[2], partial[3]));
  __syncthreads();
  float sum = (mine == -INFINITY) ? 0.0f : expf(mine - m);  // a split without keys adds nothing
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) partial[warp] = sum;
  __syncthreads();
  sum = (partial[0] + partial[1]) + (partial[2] + partial[3]);
  const float lse_row = m == -INFINITY ? -INFINITY : m + logf(sum);  // no split saw a key: −inf, O = 0
  if (t < splits) weight[t] = part_weight(mine, lse_row);
  if (t == 0) lse[row] = lse_row;
  __syncthreads();

  for (int d = t; d < dim; d += blockDim.x)
    o[row * dim + d] = static_cast<T>(sum_over_splits(o_part + row * dim + d, rows * dim, weight, splits));
}

}  // namespace fa::step11::v3_last_block
