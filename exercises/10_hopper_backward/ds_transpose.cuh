// Exercise 10 — the starter of stage 10's hole ds_transpose.cuh: dS into shared memory, transposed,
// between dK += dSᵀ·Q (dSᵀ from registers) and dQ += dS·K (dS from shared memory by descriptor).
//
// Stage 10's key-tile kernels (steps/10_hopper_backward/ladder/) include this file as
// <ds_transpose.cuh>; the exercise builds the stage (hopper_backward.cu) with this folder first on
// the include path, so the real kernels run your functions, once per query tile, in every thread:
// store_ds_transposed in rungs 1 to 4, store_ds_transposed_x4 in rung 5 on (the stage's kernel).
// Fill in the three holes, in order, between `// >>> ex10:TAG` and `// <<< ex10:TAG` (leave the
// markers: the course check and ./course check read them).
//
// The kernel computes Sᵀ and dPᵀ with keys as the rows, so a thread holds dSᵀ in the wgmma
// accumulator layout, rounded to 16 bits and packed two to a register in dsa[Br/16][4], the A
// operand of dK += dSᵀ·Q. With g = lane / 4, t = lane % 4 and key_row0 the warp's first key (of the
// block's Bc = 128), element e of 8-query block j is
//
//              queries  8j+2t        8j+2t+1
//   key key_row0 + g        e = 0        e = 1      in dsa[j / 2][2·(j mod 2)]
//   key key_row0 + g + 8    e = 2        e = 3      in dsa[j / 2][2·(j mod 2) + 1]
//
// and ptx::pack2 put the first of each pair in the low 16 bits: even e is the low half of its word.
// dQ = dS·K has the queries as rows: its A operand is dS, not dSᵀ, and these registers have keys as
// rows. So dQ reads dS from the shared [Br = 64 queries][Bc = 128 keys] tile, K-major (keys along
// each row), in the 128-byte swizzle (tc::SwizzledTile): DsTile::offset(row, column) is the first
// element of the 8-element chunk that holds column (a multiple of 8) of row; inside a chunk the
// order is unchanged. The element belongs at row `query`, column `key`.
//
//   ex10:which_element  key and query of element e of block j (from key_row0, g, t, j, e: the
//                       table above; both counted inside the block's tile, from 0).
//   ex10:store          the element's 16 bits (which word of dsa, which half), stored as one
//                       std::uint16_t at its place in the swizzled tile.
//   ex10:stmatrix_row   the same tile by stmatrix, four 8 × 8 tiles of the warp per instruction:
//                       the query and the first key of the 16-byte row whose address this lane
//                       gives (tile = lane / 8 of the four, row = lane % 8 of its eight; which
//                       register holds which tile: the function's comment).
//
// Device code cannot throw, so a hole calls fa::device_todo (fa/cuda/device_todo.cuh): the first
// thread to reach it records it, and the checks name it after they fail. The starter stores a NaN
// (in both fp16 and bf16) at the place a plain row-major tile would use: not the swizzled place;
// its stmatrix gives every lane the tile's first row.
// Check your work: ./course check ex10 (or cmake --build build --target check_ex10). Needs a GPU of
// compute capability 9.0 (an H100 or H200); elsewhere the checks report skipped (exit 77), not a
// pass. The chapter is docs/10_hopper_backward.md; the answer is solutions/10_hopper_backward/.
//
// What you should see while a hole is open: dK and dV `ok` in each FAIL's details (they read dSᵀ
// from registers) and dQ wrong (NaN from the starter's store, or errors from a misplaced one). When
// it passes: three `ok` lines, then `3 of 3 checks pass.` (each check runs the stage's kernel and
// rung 3, so it passes when all three holes are right).
// Stuck? `./course hint ex10` shows a hint, one at a time (4 in all, each nearer the code).
// Common mistakes: the query from g (that is the key: keys are the rows here); forgetting the +8 of
// the second key (e ≥ 2) or the +1 of the odd query; the high half for even e; the word of block j
// as dsa[j][..] (two blocks share a k-step: dsa[j / 2]); the offset with the whole key
// (DsTile::offset wants the chunk's first column, key & ~7; key & 7 is added after); key and query
// swapped in offset (the tile's rows are queries); in stmatrix_row, tiles 1 and 3 as the second
// query block (they are the second key block: registers 1 and 3 hold keys + 8).
#pragma once

#include <cstdint>

#include "fa/cuda/ptx/ldmatrix.cuh"

#include "fa/cuda/device_todo.cuh"

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
      fa::device_todo("ex10:which_element", "key = the warp's key_row0 plus g (+8 for e >= 2); query = from j, t and "
                                            "e & 1 (the table in ds_transpose.cuh's header)");
      const int key = 0, query = 0;
      // <<< ex10:which_element
      // >>> ex10:store
      fa::device_todo("ex10:store", "the 16 bits of element e (dsa[j / 2][...], low half for even e), stored at "
                                    "DsTile::offset(query, key & ~7) + (key & 7)");
      reinterpret_cast<std::uint16_t*>(ds_tile)[query * DsTile::kBlocks * 64 + key] = 0x7FFF;  // NaN, row-major
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
    fa::device_todo("ex10:stmatrix_row", "the query and the first key of the 16-byte row this lane addresses: tile "
                                         "and row give them (the function's comment)");
    const int query = 0, key = 0;
    // <<< ex10:stmatrix_row
    const auto address = static_cast<std::uint32_t>(__cvta_generic_to_shared(ds_tile + DsTile::offset(query, key)));
    ptx::stmatrix_x4_trans(dsa[ks], address);
  }
}

}  // namespace fa::step10
