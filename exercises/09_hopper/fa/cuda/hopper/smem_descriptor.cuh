// Exercise 09 — the starter of fa/cuda/hopper/smem_descriptor.cuh: the wgmma matrix descriptor of
// a 128-byte swizzled tile, the 64-bit name by which Hopper's tensor cores read an operand straight
// from shared memory, and how it moves through the 16-wide k-steps of a product.
//
// The course's wgmma wrappers (common/cuda/include/fa/cuda/hopper/wgmma.cuh) include this file as
// <fa/cuda/hopper/smem_descriptor.cuh>; the exercise builds its checks with this folder first on
// the include path, so every wgmma they issue reads through your descriptors. Fill in the three
// holes, in order, between `// >>> ex09:TAG` and `// <<< ex09:TAG` (leave the markers: the course
// check and ./course check read them). Read chapter 09's "The instructions, once" first. The tiles
// are stage 07's SwizzledTile: rows of 64 16-bit elements (128 bytes), 16-byte chunk c of row r
// stored at chunk c XOR (r mod 8), tiles wider than 64 as blocks of 64 columns, one after another
// (a block of `rows` rows is rows·128 bytes).
//
//   ex09:descriptor     the 64 bits: start address / 16 in bits 0-13, leading byte offset / 16 in
//                       bits 16-29, stride byte offset / 16 in bits 32-45, and the swizzle mode
//                       in bits 62-63 (1: 128 bytes). Each field keeps its low 14 bits.
//   ex09:k_major_step   the descriptor of k-step `step` (16 elements) of a K-major tile (k along
//                       the stored rows: Q, K): where does the step start? Stride offset 1024 (8
//                       rows of 128 bytes); the leading offset is unused (give 16).
//   ex09:mn_major_step  the same for an MN-major tile (n along the stored rows, k down them: V):
//                       the step starts 16 rows further; the leading offset is the distance from
//                       one block of 64 columns to the next; stride offset 1024.
//
// Device code cannot throw: a hole calls fa::device_todo(tag, what), which records the first hole
// reached, and returns 0. The checks never hand a 0 descriptor to the tensor cores; they fail, and
// the report names the hole.
//
// Check your work (needs a GPU of compute capability 9.0, an H100 or H200; without one the checks
// report "skipped", which is not a pass): ./course check ex09 (or cmake --build build --target
// check_ex09). What you should see when it passes: six `ok` lines, then `6 of 6 checks pass.` The
// chapter is docs/09_hopper.md; the answer is solutions/09_hopper/fa/cuda/hopper/smem_descriptor.cuh.
// Stuck? `./course hint ex09` shows a hint, one at a time (3 in all, each nearer the code).
// Common mistakes: forgetting that addresses are bytes while the layout counts elements (sizeof(T));
// the swizzle mode in bit 62 as 2 (that is 64 bytes) or in bits 61-63; the MN-major step moving
// 32 bytes along the row (that is K-major's); a leading offset of 128 (one row) for MN-major.
#pragma once

#include <cstdint>

#include "fa/cuda/device_todo.cuh"

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
  fa::device_todo("ex09:descriptor",
                   "(address & 0x3FFFF) >> 4 | ((leading >> 4) & 0x3FFF) << 16 | ((stride >> 4) & 0x3FFF) << 32 | 1 << 62");
  return 0;
  // <<< ex09:descriptor
}

// The descriptor of k-step `step` of a K-major tile of `rows` rows at `tile` (a shared address).
template <class T>
__device__ __forceinline__ std::uint64_t k_major_step(std::uint32_t tile, int step, int rows) {
  // >>> ex09:k_major_step
  fa::device_todo("ex09:k_major_step",
                   "smem_descriptor at tile + bytes of (step mod 4)·16 elements + (step / 4) column blocks of rows·64 "
                   "elements; leading 16, stride 1024");
  return 0;
  // <<< ex09:k_major_step
}
// The descriptor of k-step `step` of an MN-major tile of `rows` k-rows at `tile`.
template <class T>
__device__ __forceinline__ std::uint64_t mn_major_step(std::uint32_t tile, int step, int rows) {
  // >>> ex09:mn_major_step
  fa::device_todo("ex09:mn_major_step",
                   "smem_descriptor at tile + bytes of 16·step rows of 64 elements; leading = bytes of a column block "
                   "(rows·64 elements), stride 1024");
  return 0;
  // <<< ex09:mn_major_step
}

}  // namespace fa::hopper
