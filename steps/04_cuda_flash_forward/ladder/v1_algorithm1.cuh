// v1_algorithm1.cuh — rung 1 of stage 04's ladder: FlashAttention-2's Algorithm 1 (Dao 2023), as
// written, in the paper's names. Stage 03 wrote S and P to device memory; this kernel is the one
// new idea alone: a block owns Q_i, streams K_j and V_j through shared memory, and folds each tile
// of scores into m, l and O with the online softmax. Nothing else: no register tile, no vector
// loads, no pipelining, expf with τ multiplied into every score.
//
//   block (blockIdx.x = b·H + h, blockIdx.y = i): Q_i, Br = 64 rows; one thread per row r
//   for j = 0 .. Tc−1:   K_j, V_j (Bc = 64 keys) → shared memory, all threads, one float each
//                        S = τ·Q_i K_jᵀ (the thread's row: Bc dot products of length D)
//                        m_new = max(m, rowmax S); P̃ = exp(S − m_new)
//                        l = e^(m − m_new)·l + rowsum P̃;  O = e^(m − m_new)·O + P̃ V_j
//   O_i = O / l, LSE_i = m + log l
//
// Shared memory: Q_i [Br][D+1], K_j and V_j [Bc][D], S (then P̃) [Br][Bc+1]. The "+1": a warp's
// 32 threads read 32 rows at the same column; with rows of D (or Bc) floats, a multiple of 32,
// those 32 words sit in one bank (a 32-way conflict, 32 wavefronts per load); one float of padding
// puts row r in bank (r + d) mod 32, all different. K_j[c][d] and V_j[c][d] are read by all threads
// at once (a broadcast, one wavefront). O (D floats) lives in the thread's registers.
//
// Predicted (written before any run; H100, D = 64, N = 4096, B = 4, H = 32): ~5–8 TFLOP/s, about
// stage 03 naive's 5.7 and a sixth of the top rung. Why: in S every FMA needs its own shared
// load of Q_i (one wavefront per warp-FMA where the SM does 4 warp-FMAs per wavefront: the S half
// runs at ≤ 1/4 of the FMA rate, and its dot product is one dependent FMA chain per thread);
// 64 threads per block and 64–112 KiB of shared memory leave 4–6 warps per SM to hide it. P̃ V
// reuses each loaded P̃ for D FMAs and runs closer to the FMA rate. Even so it should match stage
// 03's three kernels, with none of their N² memory.
// Measured (H100, one run, docs/results/step04_ladder_d64.json and _d128.json; N = 4096, B = 4,
// H·D = 2048): 11.4 TFLOP/s at D = 64, 9.6 at D = 128, above the prediction (stage 03 naive: 5.7).
// ptxas (sm_90, CUDA 13.0), D = 32 / 64 / 128: 64 / 96 / 168 registers, no spill; shared memory
// 40.5 / 64.5 / 112.5 KiB per block (ladder.cuh has every rung).
//
// Correct everywhere the top rung is (tests/test_ladder.cu): tails (rows past Nq and keys past
// Nk are zeros in shared memory; keys past Nk are masked to −inf), Nq ≠ Nk, causal (the
// bottom-right mask on every tile), rows that see no key (O = 0, LSE = −inf), D = 32, 64, 128.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "04_cuda_flash_forward/ladder/rung_args.cuh"

namespace fa::step04::ladder {

namespace v1 {
inline constexpr int Br = 64;  // query rows per block, one thread each
inline constexpr int Bc = 64;  // keys per K/V tile
template <int D>
constexpr int smem_bytes() {
  return (Br * (D + 1) + 2 * Bc * D + Br * (Bc + 1)) * static_cast<int>(sizeof(float));
}
}  // namespace v1

template <int D>
__global__ void __launch_bounds__(v1::Br) v1_algorithm1_kernel(const RungArgs a) {
  using v1::Bc;
  using v1::Br;
  extern __shared__ float smem[];
  float* const Qi = smem;               // [Br][D + 1]
  float* const Kj = Qi + Br * (D + 1);  // [Bc][D]
  float* const Vj = Kj + Bc * D;        // [Bc][D]
  float* const S = Vj + Bc * D;         // [Br][Bc + 1]: S, then P̃; row r belongs to thread r

  const int r = static_cast<int>(threadIdx.x);      // this thread's row of Q_i
  const int i = static_cast<int>(blockIdx.y);       // the Q tile (the paper's i)
  const int row = i * Br + r;                       // ... and the query row
  const int Tc = (a.seq_k + Bc - 1) / Bc;           // key tiles (no tile skipped: stage 05)
  const std::int64_t bh = blockIdx.x;               // b·H + h
  const float* const Q = a.q + bh * a.seq_q * D;
  const float* const K = a.k + bh * a.seq_k * D;
  const float* const V = a.v + bh * a.seq_k * D;

  // Line 4: load Q_i. Consecutive threads take consecutive floats (coalesced); rows past Nq are 0.
  for (int e = r; e < Br * D; e += Br) {
    const int qr = i * Br + e / D, d = e % D;
    Qi[(e / D) * (D + 1) + d] = qr < a.seq_q ? Q[static_cast<std::int64_t>(qr) * D + d] : 0.f;
  }
  // Line 5: O = 0, l = 0, m = −inf.
  float O[D];
#pragma unroll
  for (int d = 0; d < D; ++d) O[d] = 0.f;
  float l = 0.f, m = kNegInf;

  for (int j = 0; j < Tc; ++j) {
    __syncthreads();  // every thread is done with K_{j−1}, V_{j−1}
    // Line 7: load K_j, V_j; keys past Nk are 0.
    for (int e = r; e < Bc * D; e += Br) {
      const int key = j * Bc + e / D;
      const std::int64_t at = static_cast<std::int64_t>(key) * D + e % D;
      Kj[e] = key < a.seq_k ? K[at] : 0.f;
      Vj[e] = key < a.seq_k ? V[at] : 0.f;
    }
    __syncthreads();  // K_j, V_j (and, the first time, Q_i) are in shared memory

    // Line 8: S = τ·Q_i K_jᵀ, the thread's row; masked keys get −inf (P̃ = 0).
    float row_max = kNegInf;
    for (int c = 0; c < Bc; ++c) {
      float s = 0.f;
#pragma unroll
      for (int d = 0; d < D; ++d) s += Qi[r * (D + 1) + d] * Kj[c * D + d];
      s *= a.scale;
      const int key = j * Bc + c;
      if (key >= a.seq_k || (a.causal && key > row + a.seq_k - a.seq_q)) s = kNegInf;
      S[r * (Bc + 1) + c] = s;
      row_max = fmaxf(row_max, s);
    }
    // Line 9: m_new, P̃ = exp(S − m_new), l. A row that has seen no key keeps m = −inf; it
    // subtracts 0 instead, so that exp never sees (−inf) − (−inf) = NaN: P̃ = 0, l = 0, O = 0.
    const float m_new = fmaxf(m, row_max);
    const float m_use = m_new == kNegInf ? 0.f : m_new;
    float row_sum = 0.f;
    for (int c = 0; c < Bc; ++c) {
      const float p = expf(S[r * (Bc + 1) + c] - m_use);
      S[r * (Bc + 1) + c] = p;
      row_sum += p;
    }
    const float alpha = expf(m - m_use);  // e^(m_old − m_new): ≤ 1; 0 on the row's first keys
    l = alpha * l + row_sum;
    // Line 10: O = diag(alpha)·O + P̃ V_j.
#pragma unroll
    for (int d = 0; d < D; ++d) O[d] *= alpha;
    for (int c = 0; c < Bc; ++c) {
      const float p = S[r * (Bc + 1) + c];
#pragma unroll
      for (int d = 0; d < D; ++d) O[d] += p * Vj[c * D + d];
    }
    m = m_new;
  }

  // Lines 12–15: O_i = O / l, LSE_i = m + log l. l = 0 only for a row that saw no key: O = 0, LSE = −inf.
  if (row >= a.seq_q) return;  // the padding rows of the last Q tile
  const float inv_l = l > 0.f ? 1.f / l : 0.f;
  float* const o_row = a.o + (bh * a.seq_q + row) * D;
#pragma unroll
  for (int d = 0; d < D; ++d) o_row[d] = O[d] * inv_l;
  a.lse[bh * a.seq_q + row] = l > 0.f ? m + logf(l) : kNegInf;
}

}  // namespace fa::step04::ladder
