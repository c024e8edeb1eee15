// test_reference_backward.cpp — the float64 CPU backward (fa/backward.hpp) that stage 06 is
// verified against, checked itself: by central finite differences of the scalar loss
// L = Σ dO ∘ O (whose gradients are exactly dQ, dK, dV for the upstream gradient dO), and against
// the common float64 forward for O and LSE. CPU only.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "fa/backward.hpp"
#include "fa/random.hpp"
#include "fa/reference.hpp"
#include "fa/stage.hpp"
#include "fa/testing.hpp"

namespace {

using fa::MatrixD;
using fa::VectorD;

// One head (B = H = 1) unless a test says otherwise.
fa::Problem make_problem(std::int64_t nq, std::int64_t nk, std::int64_t d, bool causal) {
  return fa::testing::problem(nq, nk, d, causal, 1, 1);
}

// Q, K, V and dO, as the harness draws them for a backward case.
fa::AttentionData make_data(const fa::Problem& p, std::uint64_t seed, fa::InputKind kind) {
  return fa::make_case_inputs(p, fa::Pass::backward, seed, kind);
}

double loss(const fa::Problem& p, const MatrixD& q, const MatrixD& k, const MatrixD& v, const MatrixD& d_o) {
  MatrixD o;
  VectorD lse;
  fa::head_forward_f64(p, q, k, v, o, lse);
  return (o.array() * d_o.array()).sum();
}

// max |finite difference − analytic| / max |analytic| over every element of one input.
double fd_error(const fa::Problem& p, MatrixD q, MatrixD k, MatrixD v, const MatrixD& d_o, int which,
                const MatrixD& analytic) {
  MatrixD& x = which == 0 ? q : which == 1 ? k : v;
  const double h = 1e-5;
  double worst = 0.0;
  for (std::int64_t r = 0; r < x.rows(); ++r)
    for (std::int64_t c = 0; c < x.cols(); ++c) {
      const double keep = x(r, c);
      x(r, c) = keep + h;
      const double up = loss(p, q, k, v, d_o);
      x(r, c) = keep - h;
      const double down = loss(p, q, k, v, d_o);
      x(r, c) = keep;
      worst = std::max(worst, std::fabs((up - down) / (2 * h) - analytic(r, c)));
    }
  const double scale = analytic.cwiseAbs().maxCoeff();
  return scale > 0 ? worst / scale : worst;
}

}  // namespace

TEST_CASE("the float64 backward equals central finite differences of L = sum(dO * O)") {
  struct Case {
    std::int64_t nq, nk, d;
    bool causal;
  };
  // Tails, Nq != Nk both ways, causal rows that see no key (Nq > Nk), N = 1.
  const Case cases[] = {{5, 7, 4, false}, {7, 5, 4, true}, {5, 9, 3, true}, {6, 6, 8, true}, {1, 1, 4, false},
                        {1, 6, 4, true},  {4, 1, 2, true}};
  for (const Case& c : cases) {
    const fa::Problem p = make_problem(c.nq, c.nk, c.d, c.causal);
    CAPTURE(p.describe());
    const fa::AttentionData data = make_data(p, 17 + c.nq * 31 + c.nk, fa::InputKind::normal);
    const MatrixD q = fa::head_f64(data.q, 0, 0), k = fa::head_f64(data.k, 0, 0),
                  v = fa::head_f64(data.v, 0, 0), d_o = fa::head_f64(data.d_o, 0, 0);
    const fa::HeadGradientsF64 g =
        fa::head_backward_f64(p, q, k, v, d_o, fa::all_indices(p.seq_q), fa::all_indices(p.seq_k));
    const double eq = fd_error(p, q, k, v, d_o, 0, g.dq);
    const double ek = fd_error(p, q, k, v, d_o, 1, g.dk);
    const double ev = fd_error(p, q, k, v, d_o, 2, g.dv);
    MESSAGE(p.describe() << ": finite differences, relative error dQ " << eq << ", dK " << ek << ", dV " << ev);
    CHECK(eq < 1e-6);
    CHECK(ek < 1e-6);
    CHECK(ev < 1e-6);
  }
}

TEST_CASE("a wrong gradient fails the finite-difference check (the check can fail)") {
  const fa::Problem p = make_problem(5, 6, 4, false);
  const fa::AttentionData data = make_data(p, 5, fa::InputKind::normal);
  const MatrixD q = fa::head_f64(data.q, 0, 0), k = fa::head_f64(data.k, 0, 0),
                v = fa::head_f64(data.v, 0, 0), d_o = fa::head_f64(data.d_o, 0, 0);
  fa::HeadGradientsF64 g = fa::head_backward_f64(p, q, k, v, d_o, fa::all_indices(5), fa::all_indices(6));
  g.dk(2, 1) *= 1.001;  // a 0.1% error in one element
  CHECK(fd_error(p, q, k, v, d_o, 1, g.dk) > 1e-5);
}

TEST_CASE("O and LSE of the float64 backward match the common float64 forward; sampled rows match all rows") {
  const fa::Problem p = fa::testing::problem(37, 53, 16, true);  // B = H = 2
  const fa::AttentionData data = make_data(p, 99, fa::InputKind::large_logits);
  const fa::ReferenceF64 fwd = fa::reference_attention_f64(p, data);
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t h = 0; h < 2; ++h) {
      const MatrixD q = fa::head_f64(data.q, b, h), k = fa::head_f64(data.k, b, h),
                    v = fa::head_f64(data.v, b, h), d_o = fa::head_f64(data.d_o, b, h);
      const fa::HeadGradientsF64 all =
          fa::head_backward_f64(p, q, k, v, d_o, fa::all_indices(37), fa::all_indices(53));
      for (std::int64_t i = 0; i < 37; ++i) {
        const std::int64_t row = (b * 2 + h) * 37 + i;
        CHECK(all.lse[i] == doctest::Approx(fwd.lse[row]).epsilon(1e-12));
        for (std::int64_t d = 0; d < 16; ++d)
          CHECK(std::fabs(all.o(i, d) - fwd.o[row * 16 + d]) < 1e-10);
      }
      const fa::HeadGradientsF64 some = fa::head_backward_f64(p, q, k, v, d_o, {0, 20, 36}, {3, 52});
      CHECK((some.dq.row(1) - all.dq.row(20)).cwiseAbs().maxCoeff() < 1e-12);
      CHECK((some.dk.row(1) - all.dk.row(52)).cwiseAbs().maxCoeff() < 1e-12);
      CHECK((some.dv.row(0) - all.dv.row(3)).cwiseAbs().maxCoeff() < 1e-12);
    }
}

TEST_CASE("rows that see no key: O = 0, LSE = -inf, dQ = 0, and they add nothing to dK, dV") {
  // Nq = 6 > Nk = 3, causal: query i sees key j iff j <= i - 3, so rows 0..2 see nothing.
  const fa::Problem p = make_problem(6, 3, 4, true);
  const fa::AttentionData data = make_data(p, 3, fa::InputKind::normal);
  const MatrixD q = fa::head_f64(data.q, 0, 0), k = fa::head_f64(data.k, 0, 0),
                v = fa::head_f64(data.v, 0, 0);
  MatrixD d_o = fa::head_f64(data.d_o, 0, 0);
  const fa::HeadGradientsF64 g = fa::head_backward_f64(p, q, k, v, d_o, fa::all_indices(6), fa::all_indices(3));
  for (int i = 0; i < 3; ++i) {
    CHECK(g.lse[i] == -std::numeric_limits<double>::infinity());
    CHECK(g.o.row(i).cwiseAbs().maxCoeff() == 0.0);
    CHECK(g.dq.row(i).cwiseAbs().maxCoeff() == 0.0);
  }
  d_o.topRows(3).setConstant(1e3);  // the upstream gradient of the blind rows must not matter
  const fa::HeadGradientsF64 g2 = fa::head_backward_f64(p, q, k, v, d_o, fa::all_indices(6), fa::all_indices(3));
  CHECK((g2.dk - g.dk).cwiseAbs().maxCoeff() == 0.0);
  CHECK((g2.dv - g.dv).cwiseAbs().maxCoeff() == 0.0);
}
