// decode_args.cuh — what every kernel of stage 11's merge ladder shares (ladder/v1_warp_per_row.cuh,
// v2_block_per_row.cuh, v3_last_block.cuh and the stage's kernel, decode_kernel.cuh): the launch's
// arguments, the tile shape per head dim, and two small device helpers. The rungs differ only in how
// the splits' partial results are merged; what they read and compute is the same, described in
// decode_kernel.cuh's header. A field that a rung does not know (the last block's counters, the
// cluster merge's flag) stays unset for it.
#pragma once


#include <cuda_runtime.h>

#include <cstdint>

#include "fa/cuda/tc/tile_ops.cuh"
#include "fa/cuda/ptx/grid_dependency.cuh"
#include "fa/cuda/ptx/cp_async.cuh"

namespace fa::step11 {
using ptx::wait_for_previous_grid;  // programmatic dependent launch (fa/cuda/ptx/grid_dependency.cuh)
using ptx::allow_next_grid;

// One launch. Q, O: [B, Hq, Nq, D]; K, V: [B, Hkv, Nk, D]; LSE: [B, Hq, Nq] (T = __half or
// __nv_bfloat16; float32 LSE and partials). rows = B·Hq·Nq = B·Hkv·group·Nq.
template <class T>
struct DecodeArgs {
  const T* q;
  const T* k;
  const T* v;
  T* o;              // splits == 1: the outputs ...
  float* lse;
  float* o_part;     // ... splits > 1 (but not cluster_merge): [splits][rows][D] and [splits][rows]
  float* lse_part;
  const int* cache_lens;  // [B]: the keys in each batch entry's cache (<= seq_k); nullptr: seq_k for all
  const int* block_table;  // a paged cache: [B][pages_per_seq] pool pages, K and V the pools
                           // [pages, Hkv, page_size, D]; nullptr: K and V are [B, Hkv, Nk, D]
  int pages_per_seq, page_size;  // page_size a multiple of every Bc (64)
  int seq_q, seq_k;       // Nq; Nk, the caches' capacity (the row stride of K and V)
  int group, heads_kv;    // G = Hq / Hkv; Hkv
  int splits, tiles_per_split;  // key chunks, and key tiles (Bc keys) per chunk
  unsigned* tile_counters;      // splits > 1, Merge::last_block: [B·Hkv][row tiles], zero between launches;
                                // nullptr: a second kernel merges
  bool cluster_merge;           // splits > 1, Merge::cluster: launched in clusters of (1, splits, 1) blocks
  long long rows;               // B·Hq·Nq
  float scale;       // τ: LSE = m·τ + ln l
  float scale_log2;  // τ·log2(e)
  bool causal;
  bool overlap_previous;        // DecodeOptions::overlap_previous: launched to overlap the previous grid
};

// One instantiation: head dim D, kWarps warps on the same 16 rows, Bc keys per warp tile, kStages
// buffers of K and V per warp.
template <int D_, int kWarps_, int kBc_, int kStages_>
struct DecodeConfig {
  static constexpr int D = D_, kWarps = kWarps_, kBc = kBc_, kStages = kStages_;
  static constexpr int kThreads = 32 * kWarps, kRows = 16;
  using QTile = tc::SwizzledTile<kRows, D>;
  using KVTile = tc::SwizzledTile<kBc, D>;
  static constexpr int kTileBytes = KVTile::kElements * 2;
  static constexpr int kWarpBytes = kStages * 2 * kTileBytes;  // a warp's K, V buffers, stage after stage
  // Q, then each warp's buffers. After the loop the buffers hold the warps' merge: Õ, m, l per row.
  // Õ's rows are kMergeStride floats apart, D + 8: a warp stores its accumulators two floats at a
  // time, lanes g = 0..7 on rows g, lanes t = 0..3 on columns 2t. With rows D apart the eight rows
  // fell on the same banks, an eight-way conflict on every store; 8 floats more shift each row by 8
  // banks, so that a store takes the two passes that 256 bytes need (measured: docs/notes/11_decoding.md).
  static constexpr int kMergeStride = D + 8;
  static constexpr int kMergeBytes = kWarps * kRows * (kMergeStride + 2) * 4;
  // Merge::cluster: each block's inbox, after Q and the warps' buffers (no copy ever lands there, so
  // the other blocks of the cluster may write into it while this one still reads keys). Every warp
  // of every split is a source; a row tile's (row, 8-column group) pairs are shared out round robin
  // over the splits, and a block's inbox holds, per source, its pairs' 8 floats of O_w (at most
  // ⌈pairs / splits⌉ of them, the bound below for any splits) and per source and row LSE_w, after
  // the mbarrier that counts the bytes in. Only the cluster launch asks for these bytes
  // (kClusterSmemBytes); the other merges launch with kSmemBytes.
  static constexpr int kMaxClusterSplits = 16;
  static constexpr int kPairs = kRows * (D / 8);
  static constexpr int kInboxFloats = kWarps * (kPairs + kMaxClusterSplits - 1) * 8;
  static constexpr int kInboxLseFloats = kWarps * kMaxClusterSplits * kRows;
  static constexpr int kSmemBytes = QTile::kElements * 2 + kWarps * kWarpBytes;
  static constexpr int kClusterSmemBytes = kSmemBytes + (kInboxFloats + kInboxLseFloats) * 4 + 8;
  static_assert(kMergeBytes <= kWarps * kWarpBytes, "the warps' merge must fit in the warps' K/V buffers");
  static_assert(kThreads == 128, "the inbox's merge gives each of 16 rows 8 threads");
  static_assert(kWarps % 4 == 0, "the inbox's merge sums its W·splits sources four at a time");
  static_assert(kWarps * D >= 128, "the last block's merge keeps 16 rows x 128 split weights in the warps' Õ");
  static_assert(kBc * (D / 8) % 32 == 0, "a warp copies whole 16-byte chunks of a K/V tile, the same count per lane");
};

// Rows [row0, row0 + ROWS) of an [n, D] matrix into a shared tile by one warp alone (its 32 lanes,
// 16 bytes per copy), rows >= n zero-filled. The copies land later: commit, wait, then __syncwarp.
template <class Tile, int ROWS, int D, class T>
__device__ __forceinline__ void warp_copy_tile(std::uint32_t tile, const T* src, int row0, int n, int lane) {
  constexpr int kChunksPerRow = D / 8, kChunks = ROWS * kChunksPerRow;
#pragma unroll
  for (int copy = 0; copy < kChunks / 32; ++copy) {
    const int i = lane + 32 * copy, r = i / kChunksPerRow, c = (i % kChunksPerRow) * 8;
    const bool valid = row0 + r < n;
    const T* from = src + static_cast<std::int64_t>(valid ? row0 + r : 0) * D + c;
    ptx::cp_async16(tile + static_cast<std::uint32_t>(sizeof(T) * Tile::offset(r, c)), from, valid);
  }
}

// The query positions of a tile's rows r0 .. r0 + n − 1 (position = r mod Nq): the smallest and
// the largest, for the keys every row sees and the keys any row sees.
__device__ __forceinline__ void position_range(int r0, int n, int seq_q, int& lo, int& hi) {
  const int first = r0 % seq_q, last = (r0 + n - 1) % seq_q;
  if (n >= seq_q || first > last) {  // the rows wrap around a head's Nq positions
    lo = 0;
    hi = seq_q - 1;
  } else {
    lo = first;
    hi = last;
  }
}

}  // namespace fa::step11
