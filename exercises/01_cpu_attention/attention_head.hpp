// Exercise 01 — the starter of stage 01's hole attention_head.hpp: one head of attention as the
// paper writes it, with Eigen.
//
// Stage 01's attention.cpp includes this file as <attention_head.hpp>; the exercise builds it with
// this folder first on the include path, so the stage runs your attention_head (the forward calls
// it once per head). Fill in the three holes of attention_head() below, in order. Each hole sits
// between the markers `// >>> ex01:TAG` and `// <<< ex01:TAG` and holds an FA_TODO that says what
// to write: replace the FA_TODO line with your code and leave the markers where they are (the
// course check reads them). For each head, with the softmax scale τ = p.softmax_scale():
//
//   ex01:scores   S = τ · Q Kᵀ                                                       [Nq, Nk]
//   ex01:softmax  row by row, over the keys j < p.keys_visible(i) that row i sees:
//                 m_i = max_j S_ij,  l_i = Σ_j exp(S_ij − m_i),  P_ij = exp(S_ij − m_i) / l_i,
//                 P_ij = 0 for the keys it does not see,  LSE_i = m_i + log l_i;
//                 a row that sees no key: P_i = 0 and LSE_i = −inf (never NaN)
//   ex01:output   O = P V                                                            [Nq, D]
//
// Check your work: this builds stage 01 with this file and checks.cpp, and runs the checks in the
// order of the holes; a failure names the TODO it stopped at, or the values that are wrong:
//   ./course check ex01        (or: cmake --build build --target check_ex01)
//
// Eigen, in one line each: S.row(i).head(n) is the first n entries of row i (and .tail(n) the
// last n); .maxCoeff() and .sum() reduce; .array() - x and .exp() work element by element;
// A.noalias() = B * C.transpose() writes a product straight into A, without a temporary.
// The chapter is docs/01_cpu_attention.md; the answer is solutions/01_cpu_attention/attention_head.hpp.
//
// What you should see when it passes: one `ok` line per check, then `5 of 5 checks pass.`
// (`ok    ex01:scores — S = scale * Q K^T`, two for ex01:softmax, one for ex01:output, one for
// the workspace). Until then the first failure names the TODO it stopped at.
// Stuck? `./course hint ex01` shows a hint, one at a time (3 in all, each nearer the code).
// Common mistakes: exp before subtracting the max (large logits → inf/inf = NaN); the mask as
// j ≤ i (top-left) instead of keys_visible(i) (bottom-right: wrong when Nq ≠ Nk); masked P left
// unwritten (the checks poison it with NaN); a row with n = 0 must give P = 0, LSE = −inf.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "01_cpu_attention/attention.hpp"
#include "fa/exercise.hpp"

namespace fa::step01 {

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
}  // namespace

void attention_head(const Problem& p, ConstMapRM Q, ConstMapRM K, ConstMapRM V, MapRM S, MapRM P,
                    MapRM O, float* lse) {
  const std::int64_t Nq = p.seq_q, Nk = p.seq_k;
  // >>> ex01:scores
  FA_TODO("ex01:scores", "S = scale * Q K^T for this head, [Nq, Nk], scale = p.softmax_scale(); "
          "write it with S.noalias() = ... so that Eigen makes no temporary");
  // <<< ex01:scores

  // >>> ex01:softmax
  FA_TODO("ex01:softmax", "for each row i, over the keys it sees (j < p.keys_visible(i)): the row max m, "
          "P = exp(S - m) / l with l the row sum, P = 0 for the other keys, lse[i] = m + log(l); "
          "a row that sees no key gets P = 0 and lse[i] = -inf");
  // <<< ex01:softmax

  // >>> ex01:output
  FA_TODO("ex01:output", "O = P V, [Nq, D], with O.noalias() = ...");
  // <<< ex01:output
}

}  // namespace fa::step01
