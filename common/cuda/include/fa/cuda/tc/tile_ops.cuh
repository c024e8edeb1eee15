// tile_ops.cuh — what every kernel of stage 07 (the ladder's rungs and the stage's kernel) shares
// besides the softmax (fragment_softmax.cuh): the kernel's arguments, the two shared-memory
// layouts of a tile, the copy of a tile from global memory, the mask on accumulator fragments,
// and the epilogue that writes O and LSE from them.
//
// Fragments (fa/cuda/ptx/mma.cuh): with g = lane / 4 and t = lane % 4, accumulator c[0..3] of an
// m16n8 tile holds rows g, g, g+8, g+8 and columns 2t, 2t+1, 2t, 2t+1.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "fa/cuda/tc/fragment_softmax.cuh"
#include "fa/cuda/ptx/cp_async.cuh"
#include "fa/cuda/ptx/mma.cuh"

namespace fa::tc {

// One launch: [B·H, N, D] tensors (T = __half or __nv_bfloat16), contiguous; LSE float32.
template <class T>
struct KernelArgs {
  const T* q;
  const T* k;
  const T* v;
  T* o;
  float* lse;
  int seq_q, seq_k;
  float scale;       // τ (the softmax scale): LSE = m·τ + ln l
  float scale_log2;  // τ·log2(e): P = 2^(s·τlog2e − m·τlog2e)
  bool causal;       // bottom-right: key j visible to query i iff j ≤ i + Nk − Nq
  bool heavy_first;  // causal: start the Q tiles with the most keys first
};
// Grouped heads and packed batches of variable lengths are not the tile operations' business: a
// later stage passes them to a kernel that takes them as policies (fa/cuda/policies/).

// A ROWS × D tile, row-major, as the plain rungs keep it: element (r, c) at r·D + c. ldmatrix (or
// the 32-bit loads of v1) reading 8 rows at one column then hit the same banks when a row is a
// multiple of 128 bytes long: an 8-way conflict.
template <int ROWS, int D>
struct PlainTile {
  static constexpr int kElements = ROWS * D;
  __device__ static int offset(int r, int c) { return r * D + c; }
};

// The same tile in column blocks 64 elements (128 bytes) wide; within a block, row r's 16-byte
// chunk c is stored at chunk c XOR (r mod 8). The 8 rows one ldmatrix phase reads at one logical
// chunk then sit in 8 different 16-byte bank groups: no conflict (docs/07_tensor_cores.md draws
// it). D = 32 and 96 are padded to a multiple of 64 columns (the padding is never read). Hopper's
// TMA and wgmma (stage 09) use this same "128-byte swizzle".
template <int ROWS, int D>
struct SwizzledTile {
  static constexpr int kBlocks = (D + 63) / 64;
  static constexpr int kElements = ROWS * kBlocks * 64;
  // c: a multiple of 8 (the first element of a 16-byte chunk).
  __device__ static int offset(int r, int c) {
    return (c >> 6) * (ROWS * 64) + r * 64 + ((((c >> 3) & 7) ^ (r & 7)) << 3);
  }
};

// The ldmatrix row address of 16-wide column step `step` and 16-row block `row_block` of a
// SwizzledTile with `tile_rows` rows, from a lane's step-0 address `base` (a 32-bit shared-window
// address; stage 07's kernel explains the lane's base). Tiles and rows are 128-byte aligned, so
// within a 64-column block the swizzled chunk is address bits 4-6 and step k is an XOR of 32·k
// bytes; the column block (step / 4) and the row block are constants added after it.
template <class T>
__device__ __forceinline__ std::uint32_t swizzled_at(std::uint32_t base, int step, int row_block, int tile_rows) {
  return (base ^ (step % 4) * 32) + sizeof(T) * ((step / 4) * (tile_rows * 64) + 16 * row_block * 64);
}

// Copies rows [row0, row0 + ROWS) of an [n, D] matrix into a shared tile, 16 bytes per copy,
// spread over the block's THREADS; rows ≥ n become zeros. kAsync: by cp.async (the copies land
// later: commit and wait, then __syncthreads), else through registers (land before the next
// __syncthreads).
// The loop counts copies per thread, a compile-time number, so that it unrolls and each copy's
// address is the first one's plus a constant (a loop over i = threadIdx.x, i += THREADS would
// stay a loop, with its branches and index arithmetic at every tile).
template <class Tile, int ROWS, int D, int THREADS, bool kAsync, class T>
__device__ __forceinline__ void load_tile(T* tile, const T* src, int row0, int n) {
  constexpr int kChunksPerRow = D / 8, kChunks = ROWS * kChunksPerRow;
#pragma unroll
  for (int copy = 0; copy < (kChunks + THREADS - 1) / THREADS; ++copy) {
    const int i = static_cast<int>(threadIdx.x) + copy * THREADS;
    if (kChunks % THREADS != 0 && i >= kChunks) break;
    const int r = i / kChunksPerRow, c = (i % kChunksPerRow) * 8;
    const bool valid = row0 + r < n;
    const T* from = src + static_cast<std::int64_t>(valid ? row0 + r : 0) * D + c;
    T* to = tile + Tile::offset(r, c);
    if constexpr (kAsync) {
      ptx::cp_async16(to, from, valid);
    } else {
      *reinterpret_cast<int4*>(to) = valid ? *reinterpret_cast<const int4*>(from) : make_int4(0, 0, 0, 0);
    }
  }
}

// The copies of load_tile_async: rows [0, valid_rows) of `rows` (an [.., D] matrix's row0), the
// rest zero-filled; kWhole: valid_rows = ROWS, no check. When the block's threads cover whole rows
// (THREADS a multiple of D/8, every head dim but 96), a thread's column is the same at every copy
// and its row steps by THREADS / (D/8): each copy's addresses are the first one's plus constants,
// which the compiler cannot see through i / (D/8) by itself.
template <class Tile, int ROWS, int D, int THREADS, bool kWhole, class T>
__device__ __forceinline__ void copy_rows_async(std::uint32_t tile, const T* rows, int valid_rows) {
  constexpr int kChunksPerRow = D / 8, kChunks = ROWS * kChunksPerRow;
  constexpr bool kRowsStep = THREADS % kChunksPerRow == 0;
  const int tid = static_cast<int>(threadIdx.x), r0 = tid / kChunksPerRow, c0 = (tid % kChunksPerRow) * 8;
  const T* first = rows + r0 * D + c0;
  const std::uint32_t first_to = tile + sizeof(T) * Tile::offset(r0, c0);
#pragma unroll
  for (int copy = 0; copy < (kChunks + THREADS - 1) / THREADS; ++copy) {
    const int i = tid + copy * THREADS;
    if (kChunks % THREADS != 0 && i >= kChunks) break;
    const int r = kRowsStep ? r0 + copy * (THREADS / kChunksPerRow) : i / kChunksPerRow;
    const int c = kRowsStep ? c0 : (i % kChunksPerRow) * 8;
    const bool valid = kWhole || r < valid_rows;
    // The thread's first source plus a constant (an immediate of the copy instruction), or any row.
    const T* from = kRowsStep ? first + copy * (THREADS / kChunksPerRow) * D : rows + r * D + c;
    // Likewise the destination when the row step keeps the swizzle's row phase (r mod 8).
    constexpr int kStep = THREADS / kChunksPerRow;
    const std::uint32_t to = kRowsStep && kStep % 8 == 0 ? first_to + copy * kStep * 64 * sizeof(T)
                                                         : tile + sizeof(T) * Tile::offset(r, c);
    ptx::cp_async16(to, valid ? from : rows, valid);
  }
}

// load_tile's asynchronous copy as stage 07's kernel issues it at every K/V tile: the tile given by
// its 32-bit shared-window address (an add from the buffer's, no generic-to-shared conversion per
// copy), and two paths (row0 < n: a tile the kernel visits). A whole tile (row0 + ROWS ≤ n, every
// tile but the last) is copied from one pointer plus per-copy constants, with no bound check; only
// the last tile clamps rows and zero-fills.
// (With one path for both, the clamp's compare, select and 64-bit multiply-add were at every copy
// of every tile: docs/07_tensor_cores.md, "The ladder, measured".)
template <class Tile, int ROWS, int D, int THREADS, class T>
__device__ __forceinline__ void load_tile_async(std::uint32_t tile, const T* src, int row0, int n) {
  const T* rows = src + static_cast<std::int64_t>(row0) * D;
  if (row0 + ROWS <= n)
    copy_rows_async<Tile, ROWS, D, THREADS, true>(tile, rows, ROWS);
  else
    copy_rows_async<Tile, ROWS, D, THREADS, false>(tile, rows, n - row0);
}

// The tiles of keys a block of query rows [i0, i0 + Br) visits, and the first one that needs a
// mask (stage 05's bounds): without causal every tile, masked from the one holding key Nk − 1 if
// Nk is not a multiple of Bc; with causal up to what the last row sees, masked from what the first
// row does not see whole.
struct KeyTiles {
  int count = 0, mask_from = 0;
};
__device__ __forceinline__ KeyTiles key_tiles(int i0, int Br, int Bc, int seq_q, int seq_k, bool causal) {
  int end = seq_k, full = seq_k;
  if (causal) {
    const int offset = seq_k - seq_q, i_last = min(i0 + Br, seq_q) - 1;
    end = max(0, min(seq_k, i_last + offset + 1));
    full = max(0, min(seq_k, i0 + offset + 1));
  }
  return {(end + Bc - 1) / Bc, full / Bc};
}

// −inf where key key0 + 8n + 2t (+1) is past the end or, causal, past what row row0 + 16·mt + g
// (+8) sees. row0 and key0: the first row of the warp's rows and the first key of the tile.
template <int MT, int NT>
__device__ __forceinline__ void mask_scores(float (&s)[MT][NT][4], int row0, int key0, int seq_q, int seq_k,
                                            bool causal) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = row0 + 16 * mt + g + (e >= 2 ? 8 : 0);
      const int limit = causal ? min(seq_k, row + seq_k - seq_q + 1) : seq_k;
#pragma unroll
      for (int n = 0; n < NT; ++n)
        if (key0 + 8 * n + 2 * t + (e & 1) >= limit) s[mt][n][e] = -INFINITY;
    }
}

// The end of the loop: each row's sum l across its group, O / l written as T, LSE = m·τ + ln l.
// A row that saw no key (l = 0) gets O = 0 and LSE = −inf. Rows ≥ Nq are not written.
template <int MT, int DT, class T>
__device__ __forceinline__ void write_output(const KernelArgs<T>& a, float (&o)[MT][DT][4], const float (&m)[MT][2],
                                             const float (&l)[MT][2], T* out, float* lse, int row0) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float total = group_sum(l[mt][r]);
      const int row = row0 + 16 * mt + g + 8 * r;
      if (row < 0 || row >= a.seq_q) continue;  // rows < 0: stage 09's persistent causal tiles
      const float inv = total > 0.0f ? 1.0f / total : 0.0f;
#pragma unroll
      for (int n = 0; n < DT; ++n)
        *reinterpret_cast<std::uint32_t*>(out + static_cast<std::int64_t>(row) * (8 * DT) + 8 * n + 2 * t) =
            ptx::pack2<T>(o[mt][n][2 * r] * inv, o[mt][n][2 * r + 1] * inv);
      if (t == 0) lse[row] = total > 0.0f ? m[mt][r] * a.scale + logf(total) : -INFINITY;
    }
}

// Row r (0: g, 1: g + 8) of an O accumulator times alpha[r]: the online softmax's rescale.
template <int DT>
__device__ __forceinline__ void rescale(float (&o)[DT][4], const float (&alpha)[2]) {
#pragma unroll
  for (int n = 0; n < DT; ++n) {
    o[n][0] *= alpha[0];
    o[n][1] *= alpha[0];
    o[n][2] *= alpha[1];
    o[n][3] *= alpha[1];
  }
}

}  // namespace fa::tc
