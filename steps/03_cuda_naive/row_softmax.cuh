// row_softmax.cuh — stage 03's second kernel: P = softmax(S), one row per thread block, and LSE.
//
// Stage 02 built the row max m and the row sum l up tile by tile (the online softmax). Here S is
// already complete in device memory, so the classic three passes over one row are enough:
//
//   m_i   = max_j S_ij                      over the keys j that row i sees (j < keys_visible(i))
//   l_i   = Σ_j exp(S_ij − m_i)             every exponent ≤ 0: no overflow, even at S ≈ 200
//   P_ij  = exp(S_ij − m_i) / l_i           0 for the keys row i does not see
//   LSE_i = m_i + log l_i                   −inf for a row that sees no key (and then P_i = 0)
//
// The picture: block b owns row b of the [B·H·Nq, Nk] matrix S; its 256 threads stride along the
// row, each folding every 256th element into its own partial max (then sum), and the block
// combines the partials (block_reduce_*, below):
//
//        S row b:  | t0 t1 t2 … t255 | t0 t1 t2 … t255 | t0 t1 … (tail: j < Nk guarded)
//                    ─► 256 partial maxes ─► warp shuffles ─► 8 warp maxes ─► one m_i
//
// Consecutive threads read consecutive floats: every pass is coalesced. The row is read three
// times (max, sum, write) and written once. Measured on an H100 (docs/03_cuda_naive.md): up to
// Nk = 4096 (16 KiB rows) it moves S in and P out at ~2.0 TB/s, as if each row were read once (the
// re-reads, most likely, hit L2); at Nk ≥ 8192 at ~1.2 TB/s. One pass over HBM is left as an
// exercise in the chapter's "what to try next".
//
// The three passes are small device functions in holes/row_passes.cuh (exercise ex03: the learner's
// copy of that file replaces it), on the block reductions of block_reduce.cuh.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "fa/cuda/check.cuh"
#include "fa/problem.hpp"

// The three passes over a row (the hole of exercise ex03): angle brackets on purpose, the exercise
// builds this kernel with its own folder first on the include path.
#include <row_passes.cuh>

namespace fa::step03 {

inline constexpr int kSoftmaxThreads = 256;  // 8 warps per row; enough to keep a 4 KiB+ row busy

// Keys that query row i sees: all Nk, or (causal, aligned to the bottom-right corner) the keys
// j ≤ i + (Nk − Nq), clamped to [0, Nk]. The same rule as Problem::keys_visible, on the device.
__device__ inline std::int64_t keys_visible_device(std::int64_t i, std::int64_t nq, std::int64_t nk, bool causal) {
  if (!causal) return nk;
  const std::int64_t last = i + (nk - nq);  // the last key row i sees; < 0: none
  return last < 0 ? 0 : (last + 1 < nk ? last + 1 : nk);
}

// s, pr: [rows, nk] with rows = B·H·Nq, row r = (b·H + h)·Nq + i; lse: [rows].
__global__ void __launch_bounds__(kSoftmaxThreads)
row_softmax_kernel(const float* __restrict__ s, float* __restrict__ pr, float* __restrict__ lse,
                   std::int64_t nq, std::int64_t nk, bool causal) {
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const std::int64_t i = row % nq;  // the query position within its head: what the mask needs
  const std::int64_t visible = keys_visible_device(i, nq, nk, causal);
  const float* s_row = s + row * nk;
  float* p_row = pr + row * nk;

  const float m = row_max(s_row, visible, scratch);     // the row max m_i; −inf for a row that sees no key
  const float l = row_sum(s_row, visible, m, scratch);  // l_i = Σ_j exp(S_ij − m_i); 0 for a row that sees no key
  write_row(s_row, p_row, lse, row, visible, nk, m, l);
}

// One block per row of S. Rows go along grid.x (up to 2³¹ − 1 of them).
inline void launch_row_softmax(const Problem& p, const float* s, float* pr, float* lse, cudaStream_t stream) {
  const std::int64_t rows = p.batch * p.heads * p.seq_q;
  if (rows > 2147483647) throw UsageError("B·H·Nq = " + std::to_string(rows) + " rows: more than one grid holds");
  row_softmax_kernel<<<static_cast<unsigned>(rows), kSoftmaxThreads, 0, stream>>>(s, pr, lse, p.seq_q, p.seq_k,
                                                                                  p.causal);
}

}  // namespace fa::step03
