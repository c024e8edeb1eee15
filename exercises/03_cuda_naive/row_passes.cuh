// Exercise 03 — the starter of stage 03's hole row_passes.cuh: the three passes of the row softmax,
// one thread block per row of S.
//
// Stage 03's kernel (steps/03_cuda_naive/row_softmax.cuh) includes this file as <row_passes.cuh>
// and calls the three functions below; the exercise builds it with this folder first on the
// include path, so the stage's kernel runs your passes. Fill in the three holes, in order. Each
// sits between the markers `// >>> ex03:TAG` and `// <<< ex03:TAG`: replace the fa::device_todo(...)
// line with your code and leave the markers where they are (the course check reads them). For row r of S (query i = r mod Nq), over the keys
// j < visible that it sees, with the block's 256 threads striding along the row (thread t takes
// j = t, t + 256, t + 512, ...):
//
//   ex03:row_max  m = max_j S_rj: each thread its partial max, then block_reduce_max(m, scratch)
//   ex03:row_sum  l = Σ_j exp(S_rj − m): each thread its partial sum, then block_reduce_sum
//   ex03:write_p  P_rj = exp(S_rj − m) / l for j < visible, P_rj = 0 for visible ≤ j < Nk;
//                 lse[r] = m + log(l) (one thread writes it); a row that sees no key
//                 (visible = 0) gets P = 0 and lse = −inf, never NaN
//
// Device code cannot throw, so a hole calls fa::device_todo("ex03:TAG", "...") instead
// (fa/cuda/device_todo.cuh): it records the first hole a thread reached, and after each check the
// checks' reporter names it, as FA_TODO does on the host.
//
// Check your work (needs a CUDA GPU; without one the checks report "skipped"):
//   ./course check ex03        (or: cmake --build build --target check_ex03)
//
// CUDA, in one line each: threadIdx.x is this thread's index in the block, blockDim.x the block's
// size (256); fmaxf, expf, logf are float32 max, exp and log; INFINITY is +inf.
// The chapter is docs/03_cuda_naive.md; the answer is solutions/03_cuda_naive/row_passes.cuh.
//
// What you should see when it passes (on a GPU): four `ok` lines, then `4 of 4 checks pass.`
// Without a GPU the checks report skipped (exit 77): that is not a pass.
// Stuck? `./course hint ex03` shows a hint, one at a time (3 in all, each nearer the code).
// Common mistakes: letting only the threads with work call block_reduce_* (every thread of the
// block must join, or the barrier hangs); writing P only for j < visible (the masked tail must be
// 0, the buffer is NaN-poisoned); a row with visible = 0 must give P = 0 and LSE = −inf, not NaN;
// more than one thread writing lse[r].
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "03_cuda_naive/block_reduce.cuh"
#include "fa/cuda/device_todo.cuh"

namespace fa::step03 {

// The row max m_i over the keys j < visible, returned to every thread; −inf when visible = 0.
__device__ inline float row_max(const float* s_row, std::int64_t visible, float* scratch) {
  float m = -INFINITY;
  // >>> ex03:row_max
  fa::device_todo("ex03:row_max", "m = the max of S over the keys j < visible of this row: a partial max per thread "
                                  "(j = threadIdx.x, += blockDim.x), then block_reduce_max");
  // <<< ex03:row_max
  return m;
}

// The row sum l_i = Σ_j exp(S_ij − m_i) over the same keys, returned to every thread; 0 when
// visible = 0.
__device__ inline float row_sum(const float* s_row, std::int64_t visible, float m, float* scratch) {
  float l = 0.0f;
  // >>> ex03:row_sum
  fa::device_todo("ex03:row_sum", "l = the sum of expf(S - m) over the same keys: a partial sum per thread, then "
                                  "block_reduce_sum");
  // <<< ex03:row_sum
  return l;
}

// P for every key of the row (0 for the masked ones) and the row's LSE, written by one thread.
__device__ inline void write_row(const float* s_row, float* p_row, float* lse, std::int64_t row,
                                 std::int64_t visible, std::int64_t nk, float m, float l) {
  // >>> ex03:write_p
  fa::device_todo("ex03:write_p", "P = expf(S - m) / l for j < visible, 0 for the other keys up to Nk; one thread "
                                  "writes lse[row] = m + logf(l), or -inf when the row sees no key");
  // <<< ex03:write_p
}

}  // namespace fa::step03
