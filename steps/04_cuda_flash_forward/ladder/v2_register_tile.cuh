// v2_register_tile.cuh — rung 2 of stage 04's ladder: the 8 × 4 register micro-tile.
//
// What changed from v1_algorithm1.cuh: the work of a thread. v1 gave each thread one query row:
// every FMA of S = Q_i K_jᵀ loaded its own float of Q_i from shared memory. Here a block of 128
// threads shares the 64 × 64 score tile as 8 × 4 micro-tiles, and every value loaded from shared
// memory feeds several FMAs from registers (register blocking, as in a good SGEMM):
//
//                 keys j0 .. j0+63
//                ┌──────────────────┐
//   Q tile       │ S tile 64 x 64   │   thread (ty, tx), ty = tid/16 in 0..7, tx = tid%16:
//   64 x D  ───► │ 128 threads,     │     rows  ty + 8·i  (i = 0..7)   8 rows
//   (smem)       │ 8 x 4 scores each│     keys  tx + 16·j (j = 0..3)   4 keys   → 32 scores
//                └──────────────────┘   the 16 threads of a half-warp share each row: row max
//                         │ P̃ (smem)     and row sum are warp shuffles (xor 1, 2, 4, 8)
//                         ▼
//   O tile 64 x D in registers: the same 8 rows, columns (k·16 + tx)·4 .. +3 → 8 x D/16 each
//
// Per 4 steps of the D loop a thread loads 8 float4 of Q and 4 float4 of K and does 128 FMAs (v1:
// 4 floats of Q and 4 of K for 4 FMAs). The row's max and sum, which v1 had in one thread, are
// spread over the 16 threads of a half-warp: the max is reduced by shuffles at every tile, the
// sum only once at the end (every partial sum gets the same factor e^(m_old − m_new)). P̃ goes
// through shared memory because P̃ V needs whole rows of it. Tiles are loaded with float4 loads
// through registers, all of K_j and V_j at the top of each tile, then a barrier.
//
// Shared layout: plain row-major, no padding, no swizzle. That costs bank conflicts, on purpose
// (v3 removes them): the 16 keys a half-warp reads at one d are 16 rows of D floats, a multiple of
// 128 bytes apart, so their float4 all sit in the same 4 banks: 16 wavefronts per K load where 2
// would do; the 2 rows a warp reads of Q (ty, ty + 1) share banks too (2 wavefronts, not 1).
//
// Predicted (before any run; H100, D = 64, N = 4096, B = 4, H = 32): ~20–25 TFLOP/s, 3–4× v1.
// Why: per 128 warp-FMAs of S (32 clocks of the SM's FMA pipes) the loads take 8·2 + 4·16 = 80
// wavefronts (80 clocks of shared memory): S runs at ~40 % of the FMA rate. P̃ V is not
// conflict-bound (V rows are read whole, 16 consecutive float4; P̃'s 2 rows cost 2 wavefronts):
// 24 wavefronts per 32 clocks. With S and P̃ V halves of the FMAs: ~(80 + 32) clocks where the FMA
// rate needs 64, plus a load stall at each tile that only the other block on the SM can fill.
// Measured (H100, the same run): 18.7 TFLOP/s at D = 64 (1.63× v1), 19.0 at D = 128 (1.97×), below
// the prediction: the bank conflicts cost more than counted (v3 removes them).
// ptxas (sm_90, CUDA 13.0), D = 32 / 64 / 128: 168 / 202 / 254 registers, no spill; shared memory
// 40 / 64 / 112 KiB per block, as the top rung.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "04_cuda_flash_forward/ladder/rung_args.cuh"

namespace fa::step04::ladder {

namespace v2 {

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

// K_j (or V_j), rows j0 .. j0+63, into a row-major [64][D] tile; rows past Nk are zeros.
template <int D>
__device__ __forceinline__ void load_kv_tile(float* tile, const float* head, int j0, int seq_k) {
  constexpr int kVecsPerRow = D / 4;
#pragma unroll
  for (int u = 0; u < kBc * kVecsPerRow / kThreads; ++u) {
    const int f = static_cast<int>(threadIdx.x) + u * kThreads;  // consecutive threads: consecutive 16 B
    const int row = f / kVecsPerRow, c4 = f % kVecsPerRow;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (j0 + row < seq_k) x = *reinterpret_cast<const float4*>(head + static_cast<std::int64_t>(j0 + row) * D + c4 * 4);
    *reinterpret_cast<float4*>(tile + row * D + c4 * 4) = x;
  }
}

// Q_i, rows i0 .. i0+63, into a row-major [64][D] tile; rows past Nq are zeros.
template <int D>
__device__ __forceinline__ void load_q_tile(float* tile, const float* head, int i0, int seq_q) {
  constexpr int kVecsPerRow = D / 4;
#pragma unroll
  for (int u = 0; u < kBr * kVecsPerRow / kThreads; ++u) {
    const int f = static_cast<int>(threadIdx.x) + u * kThreads;
    const int row = f / kVecsPerRow, c4 = f % kVecsPerRow;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (i0 + row < seq_q) x = *reinterpret_cast<const float4*>(head + static_cast<std::int64_t>(i0 + row) * D + c4 * 4);
    *reinterpret_cast<float4*>(tile + row * D + c4 * 4) = x;
  }
}

}  // namespace v2

// One block: Q tile `blockIdx.y` of head `blockIdx.x` (b·H + h), all key tiles. The register
// budget is the top rung's (min_blocks_per_sm: 3 / 2 / 2 blocks per SM at D = 32 / 64 / 128).
template <int D>
__global__ void __launch_bounds__(v2::kThreads, v2::min_blocks_per_sm<D>())
v2_register_tile_kernel(const RungArgs a) {
  using namespace v2;
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
        qv[i] = *reinterpret_cast<const float4*>(Qs + (ty + 8 * i) * D + d4 * 4);
#pragma unroll
      for (int j = 0; j < kKeysPerThread; ++j)
        kv[j] = *reinterpret_cast<const float4*>(Ks + (tx + 16 * j) * D + d4 * 4);
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
      for (int j = 0; j < kKeysPerThread; ++j) Ps[(ty + 8 * i) * kBc + tx + 16 * j] = s[i][j];
    __syncthreads();  // P̃ complete

    // Õ += P̃ V_j: per 4 keys, 8 float4 of P̃ (the thread's rows) and 4 x D/16 floats of V.
#pragma unroll
    for (int c4 = 0; c4 < kBc / 4; ++c4) {
      float4 pv[kRowsPerThread];
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i)
        pv[i] = *reinterpret_cast<const float4*>(Ps + (ty + 8 * i) * kBc + c4 * 4);
#pragma unroll
      for (int cc = 0; cc < 4; ++cc) {
        const int key = 4 * c4 + cc;
        float vv[Cols::kCount];
#pragma unroll
        for (int k = 0; k < Cols::kChunks; ++k) {
          const int col = (k * 16 + tx) * Cols::kVec;
          if constexpr (Cols::kVec == 4) {
            const float4 x = *reinterpret_cast<const float4*>(Vs + key * D + col);
            vv[4 * k] = x.x, vv[4 * k + 1] = x.y, vv[4 * k + 2] = x.z, vv[4 * k + 3] = x.w;
          } else {
            const float2 x = *reinterpret_cast<const float2*>(Vs + key * D + col);
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
