// ldmatrix.cuh — ldmatrix: a warp loads four 8 × 8 tiles of 16-bit values from shared memory
// straight into mma fragments (sm_75+). Taught in stage 07 (steps/07_tensor_cores/).
//
// Each of the 32 threads gives the shared-memory address of one 16-byte row: threads 0–7 the rows
// of tile 0, 8–15 of tile 1, 16–23 of tile 2, 24–31 of tile 3. Each thread receives, from each
// tile i, register r[i] = tile_i[lane / 4][2·(lane % 4), +1]: the fragment layout of mma.sync
// (mma.cuh). One instruction replaces eight 32-bit shared loads per thread, and the 16-byte rows
// are read whole: with a layout whose 8 rows fall in 8 different bank groups (the swizzle of
// stage 07), the load is conflict-free.
//
// .trans delivers each tile transposed: r[i] = tile_i[2·(lane % 4), +1][lane / 4], two elements
// from two rows. That is the B fragment of a matrix stored with k along the rows (V in O += P·V),
// which 32-bit loads could only assemble from two 16-bit loads.
//
// stmatrix (sm_90) is the same in the other direction: each thread gives r[i], its fragment of
// tile i, and the address of one 16-byte row; the warp writes four 8 × 8 tiles. With .trans each
// tile is written transposed: row c of tile i in memory holds column c of the fragments. Stage 10
// stores dS with it (a thread holds dSᵀ; the shared tile wants dS).
//
// Inline PTX: CCCL's cuda::ptx does not wrap ldmatrix or stmatrix (CUDA 13.0).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fa::ptx {

// The row address as a 32-bit shared-window address (what the instruction takes). A kernel that
// computes its addresses once, in this form, leaves the loop an add per address (stage 07's kernel).
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(row_address));
}

__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], std::uint32_t row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(row_address));
}

// Compute capability 9.0 on (an older target traps: no kernel built for one calls it).
__device__ __forceinline__ void stmatrix_x4_trans(const std::uint32_t (&r)[4], std::uint32_t row_address) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(row_address), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
#else
  (void)r;
  (void)row_address;
  __trap();
#endif
}

// The same from a generic pointer into shared memory.
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* row_address) {
  ldmatrix_x4(r, static_cast<std::uint32_t>(__cvta_generic_to_shared(row_address)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* row_address) {
  ldmatrix_x4_trans(r, static_cast<std::uint32_t>(__cvta_generic_to_shared(row_address)));
}

}  // namespace fa::ptx
