// The float64 backward's verification with grouped-query heads (Hkv < Hq): dK and dV of a K/V head
// are the sums over the query heads that share it. Gradients assembled here head by head from
// head_backward_f64 pass; a dK that holds one query head's share, or the group summed into the
// wrong K/V head, fails.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "fa/backward.hpp"
#include "fa/stage.hpp"
#include "fa/testing.hpp"

namespace {

// Every output of a backward computed from the float64 reference, K/V heads' dK and dV summed over
// their groups; one_share: dK of K/V head (0, 0) from its first query head only.
fa::AttentionResult assembled(const fa::Problem& p, const fa::AttentionData& data, bool one_share = false) {
  fa::AttentionResult got(p, fa::Pass::backward);
  const std::int64_t group = p.heads / p.kv_heads();
  const auto q_rows = fa::all_indices(p.seq_q), k_rows = fa::all_indices(p.seq_k);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t hk = 0; hk < p.kv_heads(); ++hk) {
      const fa::MatrixD k = fa::head_f64(data.k, b, hk), v = fa::head_f64(data.v, b, hk);
      fa::MatrixD dk = fa::MatrixD::Zero(p.seq_k, p.dim), dv = fa::MatrixD::Zero(p.seq_k, p.dim);
      for (std::int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        const fa::HeadGradientsF64 g = fa::head_backward_f64(p, fa::head_f64(data.q, b, h), k, v,
                                                             fa::head_f64(data.d_o, b, h), q_rows, k_rows);
        got.o.head(b, h) = g.o.cast<float>();
        got.dq.head(b, h) = g.dq.cast<float>();
        for (std::int64_t r = 0; r < p.seq_q; ++r)
          got.lse.set((b * p.heads + h) * p.seq_q + r, static_cast<float>(g.lse[r]));
        if (!(one_share && b == 0 && hk == 0 && h > 0)) dk += g.dk;
        dv += g.dv;
      }
      got.dk.head(b, hk) = dk.cast<float>();
      got.dv.head(b, hk) = dv.cast<float>();
    }
  return got;
}

}  // namespace

TEST_CASE("verify_backward with grouped heads: the group's sums pass, one head's share fails") {
  for (const bool causal : {false, true}) {
    fa::Problem p = fa::testing::problem(9, 13, 8, causal, 2, 6);
    p.heads_kv = 2;  // groups of 3
    p.dtype = fa::DType::float32;
    const fa::AttentionData data = fa::make_case_inputs(p, fa::Pass::backward, 11, fa::InputKind::normal);
    CAPTURE(causal);
    const fa::AttentionResult good = assembled(p, data);
    CHECK(fa::verify_backward(p, data, good, true, 0, 1).ok());
    CHECK(fa::verify_backward(p, data, good, false, 3, 1).ok());  // sampled: both groups' heads
    const fa::Verification bad = fa::verify_backward(p, data, assembled(p, data, true), true, 0, 1);
    CHECK_FALSE(bad.ok());
    CHECK(bad.reports[1].ok() == false);  // dK
    CHECK(bad.reports[2].ok());           // dV untouched
    // The two K/V heads of batch 0 swapped: each holds the other group's sums.
    fa::AttentionResult swapped = good;
    swapped.dv.head(0, 0) = good.dv.head(0, 1);
    swapped.dv.head(0, 1) = good.dv.head(0, 0);
    CHECK_FALSE(fa::verify_backward(p, data, swapped, true, 0, 1).reports[2].ok());
  }
}

TEST_CASE("verify_backward without groups reads one query head per K/V head, as before") {
  fa::Problem p = fa::testing::problem(17, 11, 16, true, 1, 3);
  p.dtype = fa::DType::float32;
  const fa::AttentionData data = fa::make_case_inputs(p, fa::Pass::backward, 12, fa::InputKind::normal);
  CHECK(fa::verify_backward(p, data, assembled(p, data), true, 0, 1).ok());
  fa::AttentionResult off = assembled(p, data);
  off.dq.set(5, off.dq.get(5) + 0.5f);
  CHECK_FALSE(fa::verify_backward(p, data, off, true, 0, 1).reports[0].ok());
}
