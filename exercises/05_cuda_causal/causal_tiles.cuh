// Exercise 05 — the starter of stage 05's hole causal_tiles.cuh: the causal mask of the key tiles
// on the diagonal.
//
// Stage 05's kernel (steps/05_cuda_causal/flash_causal_kernel.cuh) loads only the key tiles that a
// Q tile's last row sees (n_tiles: the tiles above the diagonal are never loaded) and masks only
// those from mask_from on, the first tile that the Q tile's first row does not see whole (read the
// kernel's `if (a.causal)` block and the header's picture of the three kinds of tiles). It includes
// this file as <causal_tiles.cuh>; the exercise builds it with this folder first on the include
// path, so the stage's kernel runs your mask. Fill in the hole between `// >>> ex05:diagonal_mask`
// and `// <<< ex05:diagonal_mask` (leave the markers):
//
//   ex05:diagonal_mask   on the tiles t ≥ mask_from: s[i][j] = −inf where key j0 + tx + 16j lies
//                        past what row i0 + ty + 8i sees (j > i + Nk − Nq, causal_offset = Nk − Nq).
//
// The checks run the stage's kernel on your mask against float64 and against stage 04's bits
// (stage 04 masks every tile). In device code a hole calls fa::device_todo, and the checks'
// reporter names it.
//   ./course check ex05        (or: cmake --build build --target check_ex05)
// The chapter is docs/05_cuda_causal.md; the answer is solutions/05_cuda_causal/causal_tiles.cuh.
//
// What you should see when it passes (on a GPU): two `ok` lines, then `2 of 2 checks pass.`
// Without a GPU the checks report skipped (exit 77): that is not a pass.
// Stuck? `./course hint ex05` shows a hint, one at a time (3 in all, each nearer the code).
// Common mistakes: the top-left causal mask (j ≤ i) instead of the bottom-right one
// (j ≤ i + Nk − Nq): the same when Nq = Nk, wrong otherwise; masking every tile (right, but it is
// stage 04's cost: the point is to touch only the diagonal tiles); 0 instead of −inf (exp2(0) = 1).
#pragma once

#include <cuda_runtime.h>

#include "fa/cuda/fp32/flash_tiles.cuh"  // the tile constants
#include "fa/cuda/device_todo.cuh"

namespace fa::step05 {

// The causal mask of key tile t (keys j0 .. j0 + Bc − 1) on the thread's scores: only the tiles
// from mask_from on hold a key that some row of the Q tile does not see.
__device__ __forceinline__ void mask_diagonal_tile(float (&s)[fp32::kRowsPerThread][fp32::kKeysPerThread], int t,
                                                   int mask_from, int i0, int j0, int ty, int tx, int causal_offset) {
  using fp32::kKeysPerThread;
  using fp32::kRowsPerThread;
  using fp32::kNegInf;
  // >>> ex05:diagonal_mask
  fa::device_todo("ex05:diagonal_mask", "on tiles t >= mask_from, s = -inf where the key lies past what the row sees "
                                        "(j > i + Nk - Nq)");
  // <<< ex05:diagonal_mask
}

}  // namespace fa::step05
