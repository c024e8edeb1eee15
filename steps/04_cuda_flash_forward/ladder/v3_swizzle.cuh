// v3_swizzle.cuh — rung 3 of stage 04's ladder: the XOR swizzle on the shared-memory layout.
//
// What changed from v2_register_tile.cuh: only where a float lives in shared memory. The thread
// mapping, the loads and the arithmetic are v2's (diff the two files: the index expressions).
//
// v2's row-major tiles put the 16 keys a half-warp reads at one d (rows tx + 16j, D floats
// apart, a multiple of 128 bytes) in the same 4 banks: 16 wavefronts per float4 load of K. Here
// float4 column c4 of row r lives at c4 ^ (r & 7): 8 consecutive rows spread one column over all
// 8 bank groups (32 banks = 8 float4), so those 16 keys take 2 wavefronts, the minimum for 256
// bytes, and the 2 rows of Q a warp reads (ty, ty + 1) take 1. No padding: the tiles stay 16-byte
// aligned for float4, and the shared memory stays 40 / 64 / 112 KiB (padding would have pushed
// D = 128 past two blocks per SM). The same swizzle applies to the writes of the tile loads and
// to V's reads in P̃ V (a row of V read whole is conflict-free either way).
//
// P̃ gets a second key, bit 2 flipped on odd rows: a warp stores 2 rows at once (ty, ty + 1; 16
// consecutive keys each) and with the first key alone those rows would share 4 bank groups (a
// 2-way conflict on every P̃ store); with it they fill disjoint halves of the banks, and the two
// rows a warp reads at once still fall in distinct bank groups.
//
// Predicted (before any run; H100, D = 64, N = 4096, B = 4, H = 32): +40–60 % over v2, ~30–34
// TFLOP/s. Why: the loads of S fall from 80 to 8 + 8 = 16 wavefronts per 128 warp-FMAs, below
// the 32 clocks those FMAs take; S is no longer bound by shared memory, P̃ V barely changes.
// What is left is the stall at each tile while K_j and V_j come from L2 (v4).
// Measured (H100, the same run): 32.5 TFLOP/s at D = 64 (1.74× v2), 30.8 at D = 128 (1.62×).
// ptxas (sm_90, CUDA 13.0), D = 32 / 64 / 128: 168 / 222 / 255 registers, no spill; shared memory
// 40 / 64 / 112 KiB per block.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "04_cuda_flash_forward/ladder/rung_args.cuh"

namespace fa::step04::ladder {

namespace v3 {

// The tiles, the thread layout and the register budget: the top rung's (flash_forward_kernel.cuh),
// written out here so that this rung stands alone.
inline constexpr int kBr = 64;            // query rows per block (the Q tile)
inline constexpr int kBc = 64;            // keys per K/V tile
inline constexpr int kThreads = 128;      // 4 warps: 8 row groups (ty) x 16 column groups (tx)
inline constexpr int kRowsPerThread = 8;  // rows ty + 8·i
inline constexpr int kKeysPerThread = 4;  // keys tx + 16·j
// Shared memory of one block: Q, K, V tiles [64][D] and the P̃ tile [64][64], float32.
template <int D>
constexpr int smem_bytes() {
  return (kBr * D + 2 * kBc * D + kBr * kBc) * static_cast<int>(sizeof(float));
}
// Blocks per SM the registers are budgeted for (3 / 2 / 2 at D = 32 / 64 / 128).
template <int D>
constexpr int min_blocks_per_sm() {
  return D == 32 ? 3 : 2;
}
// The thread's columns of O: kVec consecutive floats at (k·16 + tx)·kVec, k < kChunks.
template <int D>
struct OutCols {
  static constexpr int kVec = D >= 64 ? 4 : 2;    // float4 (float2 for D = 32)
  static constexpr int kChunks = D / (16 * kVec);  // 1 (D = 32, 64) or 2 (D = 128)
  static constexpr int kCount = kVec * kChunks;    // D / 16 columns per thread
};

// Float index of column `col` of row `row` in a swizzled [rows][W] tile (W floats per row): the
// float4 column c4 = col / 4 of row r is stored at c4 ^ (r & 7).
template <int W>
__device__ __forceinline__ int swz(int row, int col) {
  return row * W + ((((col >> 2) ^ (row & 7)) << 2) | (col & 3));
}

// P̃'s swizzle: as swz, with bit 2 of the key flipped on odd rows (the two rows a warp stores at
// once then use disjoint bank groups).
__device__ __forceinline__ int p_key(int row) { return (row & 7) ^ ((row & 1) << 2); }
__device__ __forceinline__ int swz_p(int row, int col) {
  return row * kBc + ((((col >> 2) ^ p_key(row)) << 2) | (col & 3));
}

// K_j (or V_j), rows j0 .. j0+63, into a swizzled [64][D] tile; rows past Nk are zeros.
template <int D>
__device__ __forceinline__ void load_kv_tile(float* tile, const float* head, int j0, int seq_k) {
  constexpr int kVecsPerRow = D / 4;
#pragma unroll
  for (int u = 0; u < kBc * kVecsPerRow / kThreads; ++u) {
    const int f = static_cast<int>(threadIdx.x) + u * kThreads;  // consecutive threads: consecutive 16 B
    const int row = f / kVecsPerRow, c4 = f % kVecsPerRow;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (j0 + row < seq_k) x = *reinterpret_cast<const float4*>(head + static_cast<std::int64_t>(j0 + row) * D + c4 * 4);
    *reinterpret_cast<float4*>(tile + swz<D>(row, c4 * 4)) = x;
  }
}

// Q_i, rows i0 .. i0+63, into a swizzled [64][D] tile; rows past Nq are zeros.
template <int D>
__device__ __forceinline__ void load_q_tile(float* tile, const float* head, int i0, int seq_q) {
  constexpr int kVecsPerRow = D / 4;
#pragma unroll
  for (int u = 0; u < kBr * kVecsPerRow / kThreads; ++u) {
    const int f = static_cast<int>(threadIdx.x) + u * kThreads;
    const int row = f / kVecsPerRow, c4 = f % kVecsPerRow;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (i0 + row < seq_q) x = *reinterpret_cast<const float4*>(head + static_cast<std::int64_t>(i0 + row) * D + c4 * 4);
    *reinterpret_cast<float4*>(tile + swz<D>(row, c4 * 4)) = x;
  }
}

}  // namespace v3

// One block: Q tile `blockIdx.y` of head `blockIdx.x` (b·H + h), all key tiles. The register
// budget is the top rung's (min_blocks_per_sm: 3 / 2 / 2 blocks per SM at D = 32 / 64 / 128).
template <int D>
__global__ void __launch_bounds__(v3::kThreads, v3::min_blocks_per_sm<D>())
v3_swizzle_kernel(const RungArgs a) {
  using namespace v3;
  using Cols = OutCols<D>;
  extern __shared__ float4 smem_f4[];  // float4: the dynamic buffer is 16-byte aligned
  float* const Qs = reinterpret_cast<float*>(smem_f4);  // [Br][D]  Q_i
  float* const Ks = Qs + kBr * D;                       // [Bc][D]  K_j
  float* const Vs = Ks + kBc * D;                       // [Bc][D]  V_j
  float* const Ps = Vs + kBc * D;                       // [Br][Bc] P̃

  const int tx = static_cast<int>(threadIdx.x) % 16, ty = static_cast<int>(threadIdx.x) / 16;
  const int i0 = static_cast<int>(blockIdx.y) * kBr;
  const std::int64_t bh = blockIdx.x;
  const float* const q_head = a.q + bh * a.seq_q * D;
  const float* const k_head = a.k + bh * a.seq_k * D;
  const float* const v_head = a.v + bh * a.seq_k * D;
  const int causal_offset = a.seq_k - a.seq_q;  // query i sees key j iff j <= i + offset

  load_q_tile<D>(Qs, q_head, i0, a.seq_q);
  const int n_tiles = (a.seq_k + kBc - 1) / kBc;  // stage 04: every key tile, masked or not

  // Per thread: 8 rows' running max m, partial row sum l over its own 4 keys per tile (reduced
  // across the half-warp once, at the end), and Õ.
  float m[kRowsPerThread], l[kRowsPerThread], o[kRowsPerThread][Cols::kCount];
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    m[i] = kNegInf;
    l[i] = 0.f;
#pragma unroll
    for (int c = 0; c < Cols::kCount; ++c) o[i][c] = 0.f;
  }
  const int qsw = ty & 7;     // the swizzle term of every row this thread owns (rows ty + 8i)
  const int ksw = tx & 7;     // ... and of every key it owns (keys tx + 16j)
  const int psw = p_key(ty);  // ... and of its rows of P̃

  for (int t = 0; t < n_tiles; ++t) {
    const int j0 = t * kBc;
    __syncthreads();  // every thread is past the last tile's P̃ V: Vs and Ps are free
    load_kv_tile<D>(Ks, k_head, j0, a.seq_k);
    load_kv_tile<D>(Vs, v_head, j0, a.seq_k);
    __syncthreads();  // K_j, V_j (and, the first time, Q_i) are in shared memory

    // S = Q_i K_jᵀ for the thread's 8 x 4 scores: per 4 columns of D, 12 float4 loads, 128 FMAs.
    float s[kRowsPerThread][kKeysPerThread];
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
      for (int j = 0; j < kKeysPerThread; ++j) s[i][j] = 0.f;
#pragma unroll
    for (int d4 = 0; d4 < D / 4; ++d4) {
      float4 qv[kRowsPerThread], kv[kKeysPerThread];
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i)
        qv[i] = *reinterpret_cast<const float4*>(Qs + (ty + 8 * i) * D + ((d4 ^ qsw) << 2));
#pragma unroll
      for (int j = 0; j < kKeysPerThread; ++j)
        kv[j] = *reinterpret_cast<const float4*>(Ks + (tx + 16 * j) * D + ((d4 ^ ksw) << 2));
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
        for (int j = 0; j < kKeysPerThread; ++j) {
          s[i][j] = fmaf(qv[i].x, kv[j].x, s[i][j]);
          s[i][j] = fmaf(qv[i].y, kv[j].y, s[i][j]);
          s[i][j] = fmaf(qv[i].z, kv[j].z, s[i][j]);
          s[i][j] = fmaf(qv[i].w, kv[j].w, s[i][j]);
        }
    }

    // τ into every score, and the mask (every tile with a key tail, or when causal): −inf → P̃ = 0.
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
      for (int j = 0; j < kKeysPerThread; ++j) s[i][j] *= a.scale;
    if (a.causal || j0 + kBc > a.seq_k) {
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i) {
        const int row = i0 + ty + 8 * i;
#pragma unroll
        for (int j = 0; j < kKeysPerThread; ++j) {
          const int col = j0 + tx + 16 * j;
          if (col >= a.seq_k || (a.causal && col > row + causal_offset)) s[i][j] = kNegInf;
        }
      }
    }

    // Fold this tile into m, l and Õ for each of the thread's 8 rows. After it, s holds P̃.
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      // The row's max over this tile: 4 keys here, then across the 16 threads that share the row.
      float tile_max = fmaxf(fmaxf(s[i][0], s[i][1]), fmaxf(s[i][2], s[i][3]));
#pragma unroll
      for (int lane_mask = 1; lane_mask < 16; lane_mask <<= 1)
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, lane_mask));
      const float m_new = fmaxf(m[i], tile_max);
      const float m_use = m_new == kNegInf ? 0.f : m_new;  // a row with no key yet: no (−inf) − (−inf)
      const float alpha = expf(m[i] - m_use);
      float row_sum = 0.f;
#pragma unroll
      for (int j = 0; j < kKeysPerThread; ++j) {
        s[i][j] = expf(s[i][j] - m_use);
        row_sum += s[i][j];
      }
      l[i] = alpha * l[i] + row_sum;  // this thread's 4 keys only: reduced across the row at the end
#pragma unroll
      for (int c = 0; c < Cols::kCount; ++c) o[i][c] *= alpha;
      m[i] = m_new;
    }

    // P̃ to shared memory: P̃ V needs whole rows of P̃, each thread holds 4 keys of its rows.
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
      for (int j = 0; j < kKeysPerThread; ++j) Ps[swz_p(ty + 8 * i, tx + 16 * j)] = s[i][j];
    __syncthreads();  // P̃ complete

    // Õ += P̃ V_j: per 4 keys, 8 float4 of P̃ (the thread's rows) and 4 x D/16 floats of V.
#pragma unroll
    for (int c4 = 0; c4 < kBc / 4; ++c4) {
      float4 pv[kRowsPerThread];
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i)
        pv[i] = *reinterpret_cast<const float4*>(Ps + (ty + 8 * i) * kBc + ((c4 ^ psw) << 2));
#pragma unroll
      for (int cc = 0; cc < 4; ++cc) {
        const int key = 4 * c4 + cc;
        float vv[Cols::kCount];
#pragma unroll
        for (int k = 0; k < Cols::kChunks; ++k) {
          const int col = (k * 16 + tx) * Cols::kVec;
          if constexpr (Cols::kVec == 4) {
            const float4 x = *reinterpret_cast<const float4*>(Vs + swz<D>(key, col));
            vv[4 * k] = x.x, vv[4 * k + 1] = x.y, vv[4 * k + 2] = x.z, vv[4 * k + 3] = x.w;
          } else {
            const float2 x = *reinterpret_cast<const float2*>(Vs + swz<D>(key, col));
            vv[2 * k] = x.x, vv[2 * k + 1] = x.y;
          }
        }
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) {
          const float p = cc == 0 ? pv[i].x : cc == 1 ? pv[i].y : cc == 2 ? pv[i].z : pv[i].w;
#pragma unroll
          for (int c = 0; c < Cols::kCount; ++c) o[i][c] = fmaf(p, vv[c], o[i][c]);
        }
      }
    }
  }

  // Once per row: l summed across the 16 threads of the row, O = Õ / l, LSE = m + log l.
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    float row_sum = l[i];
#pragma unroll
    for (int lane_mask = 1; lane_mask < 16; lane_mask <<= 1)
      row_sum += __shfl_xor_sync(0xffffffffu, row_sum, lane_mask);
    const int row = i0 + ty + 8 * i;
    if (row >= a.seq_q) continue;  // padding rows of the last Q tile
    // l = 0 only for a row that saw no key: then Õ = 0 too, and O = 0, LSE = −inf (not NaN).
    const float inv_l = row_sum > 0.f ? 1.f / row_sum : 0.f;
    float* const o_row = a.o + (bh * a.seq_q + row) * D;
#pragma unroll
    for (int k = 0; k < Cols::kChunks; ++k) {
      const int col = (k * 16 + tx) * Cols::kVec;
      if constexpr (Cols::kVec == 4)
        *reinterpret_cast<float4*>(o_row + col) = make_float4(o[i][4 * k] * inv_l, o[i][4 * k + 1] * inv_l,
                                                              o[i][4 * k + 2] * inv_l, o[i][4 * k + 3] * inv_l);
      else
        *reinterpret_cast<float2*>(o_row + col) = make_float2(o[i][2 * k] * inv_l, o[i][2 * k + 1] * inv_l);
    }
    if (tx == 0) a.lse[bh * a.seq_q + row] = row_sum > 0.f ? m[i] + logf(row_sum) : kNegInf;
  }
}

}  // namespace fa::step04::ladder
