// Exercise 13 — the checks, in the order of the holes: log_add_exp alone (float and double), merge_row
// alone, then one row of attention whose keys are cut into blocks that arrive in ring order (not
// sequence order), some hidden by the causal mask and never merged, folded in one at a time in
// float against float64 in one piece; last, stage 13's own CPU ring (ring_model.cpp, built against
// the hole) against float64 attention. The same file builds against the starter's ring_merge.hpp
// (exercises/) and the solution's (solutions/).
//   cmake --build build --target check_ex13
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <ring_merge.hpp>  // the hole: the starter's or the solution's, by the include path

#include "13_ring_attention/ring_model.hpp"
#include "fa/compare.hpp"
#include "fa/random.hpp"
#include "fa/reference.hpp"
#include "fa/row_attention.hpp"

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kInfD = std::numeric_limits<double>::infinity();

std::string column_of(std::int64_t c) { return "column " + std::to_string(c); }

}  // namespace

TEST_CASE("ex13:log_add_exp — log(exp(a) + exp(b)) without overflow, in float and double; −inf for two −inf") {
  using fa::step13::log_add_exp;
  CHECK(log_add_exp(std::log(2.0f), std::log(3.0f)) == doctest::Approx(std::log(5.0f)).epsilon(1e-6));
  CHECK(log_add_exp(std::log(3.0), std::log(2.0)) == doctest::Approx(std::log(5.0)).epsilon(1e-14));
  CHECK(log_add_exp(1000.0f, 1000.0f) == doctest::Approx(1000.0f + std::log(2.0f)).epsilon(1e-6));  // exp(1000) overflows
  CHECK(log_add_exp(-1000.0f, -1000.0f) == doctest::Approx(-1000.0f + std::log(2.0f)).epsilon(1e-6));  // exp(−1000) is 0
  CHECK(log_add_exp(-kInf, 2.5f) == 2.5f);
  CHECK(log_add_exp(2.5f, -kInf) == 2.5f);
  CHECK(log_add_exp(-kInf, -kInf) == -kInf);
  CHECK(log_add_exp(-kInfD, -kInfD) == -kInfD);
  CHECK(log_add_exp(7.0, 7.0 - 50.0) == doctest::Approx(7.0 + std::log1p(std::exp(-50.0))).epsilon(1e-15));
  // Where log1p is needed: two LSEs far apart around 0. The answer is exp(lo − hi) itself, and
  // log(1 + x) rounds 1 + x to 1 for x below float's (or double's) epsilon and returns 0. The
  // scale(0) makes Approx purely relative, so that 0 against 4e-18 fails.
  CHECK(log_add_exp(0.0f, -40.0f) == doctest::Approx(std::exp(-40.0)).epsilon(1e-5).scale(0.0));
  CHECK(log_add_exp(-50.0, 0.0) == doctest::Approx(std::exp(-50.0)).epsilon(1e-12).scale(0.0));
}

TEST_CASE("ex13:merge_row — the running pair absorbs one block; empty blocks weigh nothing, never NaN") {
  using fa::step13::merge_row;
  // A row that has seen nothing, (0, −inf), takes the first block as it is.
  float o[2] = {0.0f, 0.0f}, lse = -kInf;
  const float a[2] = {1.0f, -2.0f};
  merge_row(o, lse, a, std::log(2.0f), 2);
  CHECK(lse == doctest::Approx(std::log(2.0f)));
  CHECK(o[0] == doctest::Approx(1.0f));
  CHECK(o[1] == doctest::Approx(-2.0f));
  // A second block with three times the sum: weights 1/4 and 3/4.
  const float b[2] = {5.0f, 2.0f};
  merge_row(o, lse, b, std::log(6.0f), 2);
  CHECK(lse == doctest::Approx(std::log(8.0f)));
  CHECK(o[0] == doctest::Approx(0.25f * 1.0f + 0.75f * 5.0f));
  CHECK(o[1] == doctest::Approx(0.25f * -2.0f + 0.75f * 2.0f));
  // A block that saw no key changes nothing.
  const float empty[2] = {0.0f, 0.0f};
  const float before0 = o[0], before_lse = lse;
  merge_row(o, lse, empty, -kInf, 2);
  CHECK(o[0] == before0);
  CHECK(lse == before_lse);
  // Nothing merged with nothing: still (0, −inf), no NaN.
  double z[1] = {0.0}, z_lse = -kInfD;
  const double none[1] = {0.0};
  merge_row(z, z_lse, none, -kInfD, 1);
  CHECK(z[0] == 0.0);
  CHECK(z_lse == -kInfD);
  // Huge LSEs (scores near 1000): the weights are ratios, nothing overflows. They are only as
  // exact as LSE − LSE' is: float's spacing at 1000 is 6e-5, hence the wider tolerance.
  float big[1] = {3.0f}, big_lse = 1000.0f;
  const float other[1] = {7.0f};
  merge_row(big, big_lse, other, 1000.0f, 1);
  CHECK(big[0] == doctest::Approx(5.0f).epsilon(2e-4));
  CHECK(big_lse == doctest::Approx(1000.0f + std::log(2.0f)));
}

TEST_CASE("a row's blocks merged in ring order, one at a time, equal attention in one piece") {
  // 1000 keys, D = 16, cut into 8 blocks of uneven sizes (one empty); the blocks arrive as on
  // GPU 5 of a ring of 8 (its own block first, then 4, 3, ...); causal rows skip the blocks past
  // their last key, as the ring does, and a row in the middle of a block sees part of it.
  fa::Rng rng(1111);
  const int n = 1000, d = 16;
  std::vector<std::vector<double>> v(n, std::vector<double>(d));
  for (auto& row : v)
    for (double& x : row) x = rng.normal(0.3, 1.0);
  const std::vector<int> bounds = {0, 130, 250, 250, 517, 600, 777, 999, 1000};  // block c: [bounds[c], bounds[c+1])
  const int blocks = static_cast<int>(bounds.size()) - 1;
  for (const int visible : {1000, 700, 1}) {
    for (const double spread : {1.0, 40.0}) {
      std::vector<double> scores(n);
      for (double& s : scores) s = rng.normal(0.0, spread);
      INFO("keys visible: " << visible << ", score spread " << spread);
      const fa::RowPart whole = fa::row_attention_f64(scores, v, 0, n, visible);
      std::vector<float> o(d, 0.0f);
      float lse = -kInf;
      for (int step = 0; step < blocks; ++step) {
        const int c = ((5 - step) % blocks + blocks) % blocks;  // the ring's order on GPU 5
        if (bounds[c] >= visible) continue;                     // hidden by the mask: never computed
        const fa::RowPart part = fa::row_attention_f64(scores, v, bounds[c], bounds[c + 1], visible);
        std::vector<float> o_b(part.o.begin(), part.o.end());
        fa::step13::merge_row(o.data(), lse, o_b.data(), static_cast<float>(part.lse), d);
      }
      CHECK(lse == doctest::Approx(whole.lse).epsilon(1e-6));
      const fa::CompareReport report = fa::compare("O", o, whole.o, fa::kFloat32Tol, column_of);
      CHECK_MESSAGE(report.ok(), report.summary());
    }
  }
}

TEST_CASE("stage 13's CPU ring, with your merge, equals attention in one piece (4 GPUs, causal, large logits)") {
  // The ring as the GPUs run it, in float64: each GPU folds the blocks it receives into its running
  // (O, LSE) with merge_row, in ring order; the zigzag split gives every GPU two chunks.
  for (const fa::InputKind kind : {fa::InputKind::normal, fa::InputKind::large_logits}) {
    fa::Problem p;
    p.batch = 1;
    p.heads = 2;
    p.seq_q = p.seq_k = 200;
    p.dim = 32;
    p.causal = true;
    const fa::AttentionData in = fa::make_inputs(p, 1313, kind);
    const fa::ReferenceF64 want = fa::reference_attention_f64(p, in);
    const fa::step13::RingForwardF64 ring = fa::step13::ring_forward_model(p, in, 4, fa::step13::Split::zigzag);
    INFO(fa::to_string(kind) << " inputs");
    CHECK(fa::step13::max_relative_error(ring.o, want.o) < 1e-12);
    CHECK(fa::step13::max_relative_error(ring.lse, want.lse) < 1e-12);
  }
}
