// flash_tiles.cuh — the float32 tile building blocks of the fused forward (stage 04) that stage
// 05's causal kernel reuses: the block's shape (a 64-row Q tile, 64-key K/V tiles, 128 threads,
// each thread 8 rows x 4 keys), its shared-memory budget and occupancy, the XOR-swizzled tile
// layouts, the cp.async copy of a K/V tile, the scaled copy of a Q tile, and the thread's columns
// of O. Stage 04 teaches them (steps/04_cuda_flash_forward/flash_forward_kernel.cuh's header says
// why each is as it is: the 8 x 4 micro-tile, the swizzle, the occupancy measured by its lab's
// tuning aid); they live here because a later stage builds on them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fa/cuda/ptx/cp_async.cuh"

namespace fa::fp32 {

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
// The blocks per SM the registers are budgeted for: the launch bounds keep each thread within
// 65536 / (128 · this) registers. Shared memory alone would allow 5 / 3 / 2 blocks (D = 32 / 64 /
// 128; 228 KiB per SM, 1 KiB reserved per block), but at D = 64 a budget of 3 (168 registers)
// spills and ran at 28 TFLOP/s where 2 (234 registers, no spill) ran at 40 (step04_tune on the
// H100, docs/notes/04_cuda_flash_forward.md): the 8 x 4 scores, 8 x D/16 accumulators and the
// operands of the unrolled D loop want the registers more than a third block wants the SM.
template <int D>
constexpr int min_blocks_per_sm() {
  return D == 32 ? 3 : 2;
}

constexpr float kNegInf = -__builtin_huge_valf();
constexpr float kLn2 = 0.693147180559945309f;

// Float index of column `col` of row `row` in a swizzled [rows][W] tile (W floats per row).
template <int W>
__device__ __forceinline__ int swz(int row, int col) {
  return row * W + ((((col >> 2) ^ (row & 7)) << 2) | (col & 3));
}

// P̃'s swizzle: as swz, with bit 2 of the key flipped on odd rows. The two rows a warp writes at
// once (ty, ty + 1; 16 consecutive keys each) then land in disjoint halves of the banks (with
// plain swz they shared the same 4 bank groups: ncu counted a 2-way conflict on every P̃ store),
// and the two rows it reads at once still fall in distinct bank groups.
__device__ __forceinline__ int p_key(int row) { return (row & 7) ^ ((row & 1) << 2); }
__device__ __forceinline__ int swz_p(int row, int col) {
  return row * kBc + ((((col >> 2) ^ p_key(row)) << 2) | (col & 3));
}

// 16 bytes global → shared without passing through registers (sm_80+); `valid` = false
// zero-fills the destination (src-size 0), which is how rows past Nk become zeros. The wrappers
// live in fa/cuda/ptx/cp_async.cuh, shared with the later stages.
using ptx::cp_async16;
using ptx::cp_async_commit;
using ptx::cp_async_wait;

// Starts copying rows j0 .. j0+63 of one head's K (or V) into a swizzled [64][D] tile.
template <int D>
__device__ __forceinline__ void load_kv_tile_async(float* tile, const float* head, int j0, int seq_k) {
  constexpr int kVecsPerRow = D / 4;
#pragma unroll
  for (int u = 0; u < kBc * kVecsPerRow / kThreads; ++u) {
    const int f = static_cast<int>(threadIdx.x) + u * kThreads;  // consecutive threads: consecutive 16 B
    const int row = f / kVecsPerRow, c4 = f % kVecsPerRow;
    const bool valid = j0 + row < seq_k;
    const float* src = valid ? head + static_cast<std::int64_t>(j0 + row) * D + c4 * 4 : head;
    cp_async16(tile + swz<D>(row, c4 * 4), src, valid);
  }
}

// Rows i0 .. i0+63 of Q, times τ·log2(e), into a swizzled [64][D] tile; rows past Nq are zeros.
template <int D>
__device__ __forceinline__ void load_q_tile(float* tile, const float* head, int i0, int seq_q, float scale_log2) {
  constexpr int kVecsPerRow = D / 4;
#pragma unroll
  for (int u = 0; u < kBr * kVecsPerRow / kThreads; ++u) {
    const int f = static_cast<int>(threadIdx.x) + u * kThreads;
    const int row = f / kVecsPerRow, c4 = f % kVecsPerRow;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (i0 + row < seq_q) x = *reinterpret_cast<const float4*>(head + static_cast<std::int64_t>(i0 + row) * D + c4 * 4);
    x.x *= scale_log2, x.y *= scale_log2, x.z *= scale_log2, x.w *= scale_log2;
    *reinterpret_cast<float4*>(tile + swz<D>(row, c4 * 4)) = x;
  }
}

// The thread's columns of O: kOutVec consecutive floats at (k·16 + tx)·kOutVec, k < kOutChunks.
template <int D>
struct OutCols {
  static constexpr int kVec = D >= 64 ? 4 : 2;        // float4 (float2 for D = 32)
  static constexpr int kChunks = D / (16 * kVec);      // 1 (D = 32, 64) or 2 (D = 128)
  static constexpr int kCount = kVec * kChunks;        // D / 16 columns per thread
};

}  // namespace fa::fp32
