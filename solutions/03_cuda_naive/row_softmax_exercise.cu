// Exercise 03 — the row-softmax kernel of stage 03, one thread block per row of S.
//
// Fill in the three holes of row_softmax_kernel() below, in order. Each hole sits between the
// markers `// >>> ex03:TAG` and `// <<< ex03:TAG`: replace the device_todo(...) line with your code
// and leave the markers where they are (the course check compares what is between them with
// steps/03_cuda_naive/row_softmax.cuh). For row r of S (query i = r mod Nq), over the keys
// j < visible that it sees, with the block's 256 threads striding along the row (thread t takes
// j = t, t + 256, t + 512, ...):
//
//   ex03:row_max  m = max_j S_rj: each thread its partial max, then block_reduce_max(m, scratch)
//   ex03:row_sum  l = Σ_j exp(S_rj − m): each thread its partial sum, then block_reduce_sum
//   ex03:write_p  P_rj = exp(S_rj − m) / l for j < visible, P_rj = 0 for visible ≤ j < Nk;
//                 lse[r] = m + log(l) (one thread writes it); a row that sees no key
//                 (visible = 0) gets P = 0 and lse = −inf, never NaN
//
// Device code cannot throw, so a hole calls device_todo(hole) instead: it records the hole in a
// device flag, and the launcher, after the kernel, throws fa::TodoNotDone naming the first hole
// the kernel reached, as FA_TODO does on the host.
//
// Check your work (needs a CUDA GPU; without one the checks report "skipped"):
//   cmake --build build --target check_ex03
//
// CUDA, in one line each: threadIdx.x is this thread's index in the block, blockDim.x the block's
// size (256); fmaxf, expf, logf are float32 max, exp and log; INFINITY is +inf.
// The chapter is docs/03_cuda_naive.md; the answer is in solutions/03_cuda_naive/.
//
// Outside the holes this file differs from the stage's row_softmax.cuh only in the device_todo
// machinery and the launcher that waits for the kernel (the stage's does not wait).
//
// What you should see when it passes (on a GPU): four `ok` lines, then `4 of 4 checks pass.`
// Without a GPU the checks report skipped (exit 77): that is not a pass.
// Hints, one at a time:
//   1. The three passes are the same loop shape: for (j = threadIdx.x; j < visible; j += blockDim.x).
//   2. m = block_reduce_max(max_j S_rj); l = block_reduce_sum(Σ_j exp(S_rj − m));
//      P_rj = exp(S_rj − m) / l, LSE = m + log l.
//   3. float m = -INFINITY; for (...) m = fmaxf(m, row[j]); m = block_reduce_max(m, scratch);
//      the same with expf(row[j] − m) and block_reduce_sum; then write P for every j < Nk.
// Common mistakes: letting only the threads with work call block_reduce_* (every thread of the
// block must join, or the barrier hangs); writing P only for j < visible (the masked tail must be
// 0, the buffer is NaN-poisoned); a row with visible = 0 must give P = 0 and LSE = −inf, not NaN;
// more than one thread writing lse[r].
#include "row_softmax_exercise.cuh"

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "fa/cuda/check.cuh"
#include "fa/exercise.hpp"

namespace fa::ex03 {

namespace {

constexpr int kSoftmaxThreads = 256;

// ---- FA_TODO for device code --------------------------------------------------------------------
enum Hole : int { kRowMax = 0, kRowSum = 1, kWriteP = 2, kNoHole = INT_MAX };
const char* const kHoleMessages[] = {
    "TODO(ex03:row_max) is not done yet: m = the max of S over the keys j < visible of this row: "
    "a partial max per thread (j = threadIdx.x, += blockDim.x), then block_reduce_max",
    "TODO(ex03:row_sum) is not done yet: l = the sum of expf(S - m) over the same keys: a partial sum "
    "per thread, then block_reduce_sum",
    "TODO(ex03:write_p) is not done yet: P = expf(S - m) / l for j < visible, 0 for the other keys up "
    "to Nk; one thread writes lse = m + logf(l), or -inf when the row sees no key",
};
__device__ int g_hole_reached;  // the lowest hole a thread reached; kNoHole: none
[[maybe_unused]] __device__ void device_todo(Hole hole) { atomicMin(&g_hole_reached, static_cast<int>(hole)); }

// ---- given: the block reductions and the causal limit (as in the stage) --------------------------
__device__ inline std::int64_t keys_visible_device(std::int64_t i, std::int64_t nq, std::int64_t nk, bool causal) {
  if (!causal) return nk;
  const std::int64_t last = i + (nk - nq);
  return last < 0 ? 0 : (last + 1 < nk ? last + 1 : nk);
}
__device__ inline float warp_reduce_max(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}
__device__ inline float warp_reduce_sum(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}
// The max (sum) of one value per thread over the whole block, returned to every thread. Every
// thread of the block must call it (it contains barriers).
__device__ inline float block_reduce_max(float x, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = warp_reduce_max(x);
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < warps ? scratch[lane] : -INFINITY;
  x = warp_reduce_max(x);
  __syncthreads();
  return x;
}
__device__ inline float block_reduce_sum(float x, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = warp_reduce_sum(x);
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < warps ? scratch[lane] : 0.0f;
  x = warp_reduce_sum(x);
  __syncthreads();
  return x;
}

__global__ void __launch_bounds__(kSoftmaxThreads)
row_softmax_kernel(const float* __restrict__ s, float* __restrict__ pr, float* __restrict__ lse,
                   std::int64_t nq, std::int64_t nk, bool causal) {
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const std::int64_t i = row % nq;
  const std::int64_t visible = keys_visible_device(i, nq, nk, causal);
  const float* s_row = s + row * nk;
  float* p_row = pr + row * nk;

  float m = -INFINITY;  // the row max m_i; stays −inf for a row that sees no key
  // >>> ex03:row_max
  for (std::int64_t j = threadIdx.x; j < visible; j += blockDim.x) m = fmaxf(m, s_row[j]);
  m = block_reduce_max(m, scratch);
  // <<< ex03:row_max

  float l = 0.0f;  // the row sum l_i = Σ_j exp(S_ij − m_i); stays 0 for a row that sees no key
  // >>> ex03:row_sum
  for (std::int64_t j = threadIdx.x; j < visible; j += blockDim.x) l += expf(s_row[j] - m);
  l = block_reduce_sum(l, scratch);
  // <<< ex03:row_sum

  // >>> ex03:write_p
  // Every column is written, the masked ones with 0, so PV can sum over all Nk keys. A row that
  // sees no key never evaluates exp(−inf − (−inf)) = NaN: its loop above was empty.
  const float inv_l = visible > 0 ? 1.0f / l : 0.0f;
  for (std::int64_t j = threadIdx.x; j < nk; j += blockDim.x)
    p_row[j] = j < visible ? expf(s_row[j] - m) * inv_l : 0.0f;
  if (threadIdx.x == 0) lse[row] = visible > 0 ? m + logf(l) : -INFINITY;
  // <<< ex03:write_p
}

}  // namespace

void launch_row_softmax(const Problem& p, const float* s, float* pr, float* lse, cudaStream_t stream) {
  const std::int64_t rows = p.batch * p.heads * p.seq_q;
  const int none = kNoHole;
  FA_CUDA_CHECK(cudaMemcpyToSymbolAsync(g_hole_reached, &none, sizeof none, 0, cudaMemcpyHostToDevice, stream));
  row_softmax_kernel<<<static_cast<unsigned>(rows), kSoftmaxThreads, 0, stream>>>(s, pr, lse, p.seq_q, p.seq_k,
                                                                                  p.causal);
  FA_CUDA_CHECK_LAUNCH();
  int reached = kNoHole;
  FA_CUDA_CHECK(cudaMemcpyFromSymbolAsync(&reached, g_hole_reached, sizeof reached, 0, cudaMemcpyDeviceToHost, stream));
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (reached != kNoHole) throw TodoNotDone(kHoleMessages[reached]);
}

}  // namespace fa::ex03
