// causal_tiles.cuh — stage 05's hole: the causal mask of a key tile on the diagonal.
//
// The kernel (flash_causal_kernel.cuh) loads only the key tiles that the Q tile's last row sees
// (n_tiles) and masks only those from mask_from on, the first tile that its first row does not see
// whole; on those tiles, mask_diagonal_tile sets S = −inf where key j > i + (Nk − Nq).
//
// Kept apart from the kernel, which includes it as <causal_tiles.cuh>, because it is exercise
// ex05: the learner's copy (exercises/05_cuda_causal/causal_tiles.cuh) has the marked region
// emptied, and the exercise builds stage 05's own kernel against it.
#pragma once

#include <cuda_runtime.h>

#include "fa/cuda/fp32/flash_tiles.cuh"  // the tile constants

namespace fa::step05 {

// The causal mask of key tile t (keys j0 .. j0 + Bc − 1) on the thread's scores: only the tiles
// from mask_from on hold a key that some row of the Q tile does not see.
__device__ __forceinline__ void mask_diagonal_tile(float (&s)[fp32::kRowsPerThread][fp32::kKeysPerThread], int t,
                                                   int mask_from, int i0, int j0, int ty, int tx, int causal_offset) {
  using fp32::kKeysPerThread;
  using fp32::kRowsPerThread;
  using fp32::kNegInf;
  // >>> ex05:diagonal_mask
  if (t >= mask_from) {
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int row = i0 + ty + 8 * i;
#pragma unroll
      for (int j = 0; j < kKeysPerThread; ++j)
        if (j0 + tx + 16 * j > row + causal_offset) s[i][j] = kNegInf;
    }
  }
  // <<< ex05:diagonal_mask
}

}  // namespace fa::step05
