// Exercise 10 — the starter of stage 10's hole ds_transpose.cuh: dS into shared memory, transposed,
// between dK += dSᵀ·Q (dSᵀ from registers) and dQ += dS·K (dS from shared memory by descriptor).
//
// Stage 10's key-tile kernel (steps/10_hopper_backward/ladder/v1_wgmma.cuh) includes this file as
// <ds_transpose.cuh>; the exercise builds the stage (hopper_backward.cu) with this folder first on
// the include path, so the real kernel runs your function, once per query tile, in every thread.
// Fill in the two holes, in order, between `// >>> ex10:TAG` and `// <<< ex10:TAG` (leave the
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
//
// Device code cannot throw, so a hole calls fa::device_todo (fa/cuda/device_todo.cuh): the first
// thread to reach it records it, and the checks name it after they fail. The starter stores a NaN
// (in both fp16 and bf16) at the place a plain row-major tile would use: not the swizzled place.
// Check your work: ./course check ex10 (or cmake --build build --target check_ex10). Needs a GPU of
// compute capability 9.0 (an H100 or H200); elsewhere the checks report skipped (exit 77), not a
// pass. The chapter is docs/10_hopper_backward.md; the answer is solutions/10_hopper_backward/.
//
// What you should see while a hole is open: dK and dV `ok` in each FAIL's details (they read dSᵀ
// from registers) and dQ wrong (NaN from the starter's store, or errors from a misplaced one). When
// it passes: three `ok` lines, then `3 of 3 checks pass.`
// Stuck? `./course hint ex10` shows a hint, one at a time (3 in all, each nearer the code).
// Common mistakes: the query from g (that is the key: keys are the rows here); forgetting the +8 of
// the second key (e ≥ 2) or the +1 of the odd query; the high half for even e; the word of block j
// as dsa[j][..] (two blocks share a k-step: dsa[j / 2]); the offset with the whole key
// (DsTile::offset wants the chunk's first column, key & ~7; key & 7 is added after); key and query
// swapped in offset (the tile's rows are queries).
#pragma once

#include <cstdint>

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

}  // namespace fa::step10
