// attention_head.hpp — stage 01's hole: one head of attention as the paper writes it, S = τ·QKᵀ,
// P = softmax(S) by rows (with the causal mask), O = PV and LSE.
//
// Kept apart from attention.cpp, which includes it as <attention_head.hpp>, because it is
// exercise ex01: the learner's copy (exercises/01_cpu_attention/attention_head.hpp) has the three
// marked regions emptied, and the exercise builds stage 01's own attention.cpp against it. It
// defines attention_head (declared in attention.hpp) and is included by attention.cpp alone.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "01_cpu_attention/attention.hpp"

namespace fa::step01 {

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
}  // namespace

void attention_head(const Problem& p, ConstMapRM Q, ConstMapRM K, ConstMapRM V, MapRM S, MapRM P,
                    MapRM O, float* lse) {
  const std::int64_t Nq = p.seq_q, Nk = p.seq_k;
  // >>> ex01:scores
  // noalias(): S overlaps neither Q nor K, so Eigen may write the product straight into S
  // instead of into a hidden [Nq, Nk] temporary that the meter could not see.
  S.noalias() = p.softmax_scale() * (Q * K.transpose());
  // <<< ex01:scores

  // >>> ex01:softmax
  for (std::int64_t i = 0; i < Nq; ++i) {
    // Row i sees keys 0 .. visible-1; the masked keys get probability 0.
    const std::int64_t visible = p.keys_visible(i);
    auto s = S.row(i);
    auto prob = P.row(i);
    if (visible == 0) {  // nothing to attend to: O_i = 0 (from P_i = 0) and LSE_i = −inf, not NaN
      prob.setZero();
      lse[i] = -kInf;
      continue;
    }
    const float m = s.head(visible).maxCoeff();
    prob.head(visible) = (s.head(visible).array() - m).exp();  // every exponent ≤ 0: no overflow
    prob.tail(Nk - visible).setZero();
    const float l = prob.head(visible).sum();  // ≥ 1: the max element contributes exp(0)
    prob.head(visible) /= l;
    lse[i] = m + std::log(l);
  }
  // <<< ex01:softmax

  // >>> ex01:output
  O.noalias() = P * V;
  // <<< ex01:output
}

}  // namespace fa::step01
