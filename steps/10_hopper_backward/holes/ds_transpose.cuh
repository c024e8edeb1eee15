// ds_transpose.cuh — dS into shared memory, transposed: the step between dK += dSᵀ·Q, which takes
// dSᵀ from registers, and dQ += dS·K, which must read dS from shared memory by descriptor.
//
// Stage 10's key-tile kernel (ladder/v1_wgmma.cuh) computes Sᵀ and dPᵀ with keys as the rows, so a
// thread ends a query tile holding dSᵀ in the wgmma accumulator layout, rounded to 16 bits and
// packed two to a register: dsa[Br/16][4], exactly the A operand registers of dK += dSᵀ·Q (the
// C→A identity). With g = lane / 4, t = lane % 4 and key_row0 the warp's first key (16 keys per
// warp, counted from the block's first key), the thread's element e of 8-query block j is
//
//              queries  8j+2t        8j+2t+1
//   key key_row0 + g        e = 0        e = 1      in dsa[j / 2][2·(j mod 2)]
//   key key_row0 + g + 8    e = 2        e = 3      in dsa[j / 2][2·(j mod 2) + 1]
//
// (two 8-query blocks make one 16-wide k-step of dK's A operand: block j is step j / 2, its first
// or second pair of registers). pack2 puts its first value in the low 16 bits: the even e (the
// query 8j + 2t) is the low half of its word, the odd e the high half.
//
// Why transposed: dQ = dS·K has the queries as its rows, so its A operand is dS [Br queries][Bc
// keys], not dSᵀ. wgmma takes A from registers only in the accumulator layout of its own rows, and
// these registers have keys as rows: dQ reads dS from shared memory instead, K-major (the keys, its
// k dimension, run along each row), the layout of Q and K in S = Q·Kᵀ. So each element goes to row
// `query`, column `key` of the [Br][Bc] tile, as the same 16-bit value dK used (one rounding for
// both products). The tile is in the 128-byte swizzle (tc::SwizzledTile, the layout the wgmma
// descriptor expects): columns in blocks of 64 keys, each row of a block 8 chunks of 8 keys, chunk
// c of row r stored at chunk c XOR (r mod 8). DsTile::offset(row, column) gives a chunk's first
// element (column a multiple of 8); within a chunk the order is unchanged. So the element lands at
//   DsTile::offset(query, key & ~7) + (key & 7)
// one 16-bit store each (32 per thread per query tile at Br = 64).
//
// Rung 5 on (the stage's kernel) the same elements go by stmatrix, four 8 × 8 tiles of a warp per
// instruction (store_ds_transposed_x4, below).
//
// The hole of exercise ex10 (exercises/10_hopper_backward/ds_transpose.cuh: this file with the two
// regions of store_ds_transposed and the one of store_ds_transposed_x4 as TODOs); the stage
// includes it as <ds_transpose.cuh>, from holes/.
#pragma once

#include <cstdint>

#include "fa/cuda/ptx/ldmatrix.cuh"

namespace fa::step10 {

// In: dsa, this thread's dSᵀ (KS = Br/16 k-steps of dK's A operand); ds_tile, the shared [Br][Bc]
// tile (DsTile: tc::SwizzledTile<Br, Bc>); key_row0, the warp's first key of the block; g, t. Out:
// the thread's 8·KS elements of dS at their swizzled places. The caller fences the stores into the
// async proxy and waits for every warp's before dQ reads the tile.
template <class DsTile, class T, int KS>
__device__ __forceinline__ void store_ds_transposed(const std::uint32_t (&dsa)[KS][4], T* ds_tile, int key_row0, int g,
                                                    int t) {
#pragma unroll
  for (int j = 0; j < 2 * KS; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      // >>> ex10:which_element
      const int key = key_row0 + g + (e >= 2 ? 8 : 0), query = 8 * j + 2 * t + (e & 1);
      // <<< ex10:which_element
      // >>> ex10:store
      const std::uint32_t word = dsa[j / 2][(j % 2) * 2 + (e >= 2 ? 1 : 0)];
      const std::uint16_t half = static_cast<std::uint16_t>((e & 1) ? word >> 16 : word & 0xFFFF);
      reinterpret_cast<std::uint16_t*>(ds_tile)[DsTile::offset(query, key & ~7) + (key & 7)] = half;
      // <<< ex10:store
    }
}

// The same stores by stmatrix (rung 5 on, the stage's kernel): one instruction per k-step writes a
// warp's 16 keys × 16 queries. dsa[ks][0..3] are the fragments of four 8 × 8 tiles of dSᵀ: keys key_row0 + 0..7 and
// + 8..15 (registers 0 and 1, then 2 and 3) of queries 16ks + 0..7 (registers 0, 1) and
// 16ks + 8..15 (2, 3). Written transposed (.trans), row c of each is the query's 8 keys: one
// 16-byte chunk of the swizzled tile, whose address lane 8i + c gives for tile i. The 8 rows of a
// tile are 8 queries in 8 different chunk positions: no bank conflict.
template <class DsTile, class T, int KS>
__device__ __forceinline__ void store_ds_transposed_x4(const std::uint32_t (&dsa)[KS][4], T* ds_tile, int key_row0,
                                                       int lane) {
  const int tile = lane / 8, row = lane % 8;  // this lane gives the address of row `row` of tile `tile`
#pragma unroll
  for (int ks = 0; ks < KS; ++ks) {
    // >>> ex10:stmatrix_row
    const int query = 16 * ks + 8 * (tile / 2) + row, key = key_row0 + 8 * (tile % 2);
    // <<< ex10:stmatrix_row
    const auto address = static_cast<std::uint32_t>(__cvta_generic_to_shared(ds_tile + DsTile::offset(query, key)));
    ptx::stmatrix_x4_trans(dsa[ks], address);
  }
}

}  // namespace fa::step10
