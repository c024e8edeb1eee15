// Stage 01 — attention as written in the paper: S and P materialized, on the CPU with Eigen.
//
// For each head (b, h), with Q [Nq, D], K and V [Nk, D] and the softmax scale τ (1/√D by default):
//
//   S = τ · Q Kᵀ                                   [Nq, Nk]  scores
//   m_i = max_j S_ij,   l_i = Σ_j exp(S_ij − m_i)            row max and row sum, over visible j
//   P_ij = exp(S_ij − m_i) / l_i                   [Nq, Nk]  probabilities, rows sum to 1
//   O = P V                                        [Nq, D]   output
//   LSE_i = m_i + log l_i                          [Nq]      kept for the backward pass
//
// Subtracting the row max m_i before exp is what makes the softmax stable: every exponent is
// ≤ 0, so exp never overflows, whatever the size of the scores (try --inputs large-logits).
// Causal: query i sees key j iff j ≤ i + (Nk − Nq), the mask aligned to the bottom-right corner
// (Problem::keys_visible). A row that sees no key (Nq > Nk, the first rows) gets O = 0 and
// LSE = −inf.
//
// Build and run (the default run is a short sweep, verified against a float64 loop):
//   cmake -S . -B build && cmake --build build --target step01_cpu_attention
//   build/steps/01_cpu_attention/step01_cpu_attention            (--help for the flags)
//
// What changed from the previous stage: this is the first stage, the baseline. Every later stage
// computes the same O and LSE and is verified against this one, directly or through a chain.
//
// Known limits, on purpose:
// - Memory: S and P take 2·Nq·Nk·4 bytes (measured by the meter; 32 MiB at N = 2048, 2 GiB at
//   N = 16k). They are allocated once and reused for every head, so the extra memory does not
//   grow with B·H. P could overwrite S and halve that; it stays separate to mirror the paper
//   (and stage 03, which keeps both in GPU memory).
// - One CPU thread (the course builds Eigen without OpenMP). Eigen's GEMM packs blocks of its
//   operands into internal buffers sized by the caches, not by N; the meter does not see them.
// - float32 only. Against float64 the max abs error is about 1e-6 with scores of order 1, and
//   about 1e-4 with scores of 50 to 200 (--inputs large-logits), where the float32 scores
//   themselves carry that much rounding (docs/tolerance.md: the allowed error follows it).
#include "attention.hpp"

// The three steps of one head, S, P and O (the hole of exercise ex01): angle brackets on purpose,
// the exercise builds this file with its own folder first on the include path.
#include <attention_head.hpp>

namespace fa::step01 {

void attention_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                       MemoryMeter& workspace) {
  const std::int64_t Nq = p.seq_q, Nk = p.seq_k, D = p.dim;
  // The whole workspace: S and P for one head, reused by every head. This is the N² memory that
  // the later stages remove.
  HostBuffer<float> s_buf(workspace, static_cast<std::size_t>(Nq * Nk));
  HostBuffer<float> p_buf(workspace, static_cast<std::size_t>(Nq * Nk));
  MapRM S(s_buf.data(), Nq, Nk), P(p_buf.data(), Nq, Nk);
  for (std::int64_t bh = 0; bh < p.heads_total(); ++bh) {  // (b, h) flattened: heads are independent
    const ConstMapRM Q(in.q.as<float>() + bh * Nq * D, Nq, D);
    const ConstMapRM K(in.k.as<float>() + bh * Nk * D, Nk, D);
    const ConstMapRM V(in.v.as<float>() + bh * Nk * D, Nk, D);
    MapRM O(out.o.as<float>() + bh * Nq * D, Nq, D);
    attention_head(p, Q, K, V, S, P, O, out.lse.as<float>() + bh * Nq);
  }
}

}  // namespace fa::step01
