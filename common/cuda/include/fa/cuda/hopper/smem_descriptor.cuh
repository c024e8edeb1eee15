// smem_descriptor.cuh — the wgmma matrix descriptor (sm_90a): the 64-bit name by which Hopper's
// tensor cores read an operand straight from shared memory, and how it moves through the 16-wide
// k-steps of a product. Taught in stage 09 (docs/09_hopper.md, "The instructions, once"); used by
// fa/cuda/hopper/wgmma.cuh's callers (stage 09's kernels). Exercise ex09's hole: its three regions
// between the ex09 markers are what the learner writes (exercises/09_hopper/ mirrors this path).
#pragma once

#include <cstdint>

namespace fa::hopper {

// The matrix descriptor of a tile in the 128-byte swizzle (stage 07's SwizzledTile: rows of 64
// 16-bit elements, 128 bytes each, 16-byte chunk c of row r stored at chunk c XOR (r mod 8); tiles
// wider than 64 are blocks of 64 columns one after another). Bits: start address / 16 (0-13), leading
// byte offset / 16 (16-29), stride byte offset / 16 (32-45), swizzle mode (62-63: 1 = 128 bytes).
// The hardware applies the XOR to the address bits, so the tile must start 1024-byte aligned.
//   K-major (k runs along the stored rows: A = Q, B = K for S = Q·Kᵀ): the 8-row groups are 1024
//     bytes apart (stride offset); the leading offset is unused. Step k (16 elements) starts at
//     byte 32·(k mod 4) of the row, in column block k / 4.
//   MN-major (n runs along the stored rows: B = V for O = P·V, a [keys][D] tile, kTransB = 1): the
//     8-row groups along k are 1024 bytes apart (stride offset) and the blocks of 64 columns of n
//     rows·128 bytes apart (leading offset). Step k starts 16 rows (2048 bytes) further.
__device__ __forceinline__ std::uint64_t smem_descriptor(std::uint32_t smem_address, std::uint32_t leading_bytes,
                                                         std::uint32_t stride_bytes) {
  // >>> ex09:descriptor
  return static_cast<std::uint64_t>((smem_address & 0x3FFFF) >> 4) |
         static_cast<std::uint64_t>((leading_bytes >> 4) & 0x3FFF) << 16 |
         static_cast<std::uint64_t>((stride_bytes >> 4) & 0x3FFF) << 32 | std::uint64_t{1} << 62;
  // <<< ex09:descriptor
}

// The descriptor of k-step `step` of a K-major tile of `rows` rows at `tile` (a shared address).
template <class T>
__device__ __forceinline__ std::uint64_t k_major_step(std::uint32_t tile, int step, int rows) {
  // >>> ex09:k_major_step
  return smem_descriptor(tile + sizeof(T) * ((step % 4) * 16 + (step / 4) * rows * 64), 16, 1024);
  // <<< ex09:k_major_step
}
// The descriptor of k-step `step` of an MN-major tile of `rows` k-rows at `tile`.
template <class T>
__device__ __forceinline__ std::uint64_t mn_major_step(std::uint32_t tile, int step, int rows) {
  // >>> ex09:mn_major_step
  return smem_descriptor(tile + sizeof(T) * (step * 16 * 64), sizeof(T) * rows * 64, 1024);
  // <<< ex09:mn_major_step
}

}  // namespace fa::hopper
