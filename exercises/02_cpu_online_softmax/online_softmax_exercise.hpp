// Exercise 02 — the functions that online_softmax_exercise.cpp defines: stage 02's, in fa::ex02.
#pragma once

#include <cstdint>

#include "fa/memory.hpp"
#include "fa/problem.hpp"
#include "fa/tensor.hpp"

namespace fa::ex02 {

// The tile: Br query rows against Bc keys, as in stage 02.
inline constexpr std::int64_t kBr = 64;
inline constexpr std::int64_t kBc = 64;

// The forward of every host stage (fa::HostForward). Its workspace is one Br x Bc score tile and
// m, l for every query row of a head: (Br·Bc + 2·Nq)·4 bytes, O(N).
void attention_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                       MemoryMeter& workspace);

// The online softmax of one tile: folds the scores S of query rows i0 .. i0 + S.rows() − 1
// against keys j0 .. j0 + S.cols() − 1 into those rows' running max m, running sum l and
// unnormalised output Õ_i. On return S holds P̃ = exp(S − m_new), 0 where the causal mask hides a
// key, ready for Õ_i += P̃ V_j. The checks run it alone first.
void online_softmax_update(const Problem& p, std::int64_t i0, std::int64_t j0, MapRM S, float* m,
                           float* l, MapRM O_i);

}  // namespace fa::ex02
