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

// The 16-bit rule of the backward (verify_backward for fp16/bf16, backward.hpp): its yardstick,
// the plain 16-bit backward, is within a few 16-bit roundings of float64; a result at float64's
// gradients rounded to the dtype passes; one whose dK is off by 10 % of its scale fails. (bf16's
// plain error is a few tenths of a percent of the gradients' scale, and the rule allows 4 times
// it plus 4 roundings: a few percent. A wrong kernel is off by O(1).)
TEST_CASE("the 16-bit backward rule: the plain backward is near float64, rounded float64 passes, a bent dK fails") {
  for (const fa::DType type : {fa::DType::bfloat16, fa::DType::float16})
    for (const bool causal : {false, true}) {
      fa::Problem p = fa::testing::problem(37, 53, 32, causal, 1, 2);
      p.dtype = type;
      const fa::AttentionData data = make_data(p, 11, fa::InputKind::normal);
      const fa::AttentionData exact = fa::as_float32(data);  // the 16-bit values, as float32
      fa::AttentionResult r(p, fa::Pass::backward);
      double dk_scale = 0;
      for (std::int64_t h = 0; h < p.heads; ++h) {
        const MatrixD q = fa::head_f64(exact.q, 0, h), k = fa::head_f64(exact.k, 0, h),
                      v = fa::head_f64(exact.v, 0, h), d_o = fa::head_f64(exact.d_o, 0, h);
        const auto qr = fa::all_indices(p.seq_q), kr = fa::all_indices(p.seq_k);
        const fa::HeadGradientsF64 ref = fa::head_backward_f64(p, q, k, v, d_o, qr, kr);
        const fa::HeadGradientsPlain plain =
            fa::head_backward_plain(p, q.cast<float>(), k.cast<float>(), v.cast<float>(), d_o.cast<float>(), qr, kr);
        const double u = fa::unit_roundoff(type);
        // Within a few dozen roundings of the largest gradient: a plain backward, not a wrong one.
        CHECK((plain.dq.cast<double>() - ref.dq).cwiseAbs().maxCoeff() <= 64 * u * ref.dq.cwiseAbs().maxCoeff());
        CHECK((plain.dk.cast<double>() - ref.dk).cwiseAbs().maxCoeff() <= 64 * u * ref.dk.cwiseAbs().maxCoeff());
        CHECK((plain.dv.cast<double>() - ref.dv).cwiseAbs().maxCoeff() <= 64 * u * ref.dv.cwiseAbs().maxCoeff());
        // The result: float64 rounded to the dtype (the LSE in float32).
        auto put = [&](fa::HostTensor& t, const MatrixD& m) {
          for (std::int64_t i = 0; i < m.size(); ++i) t.set(t.head_offset(0, h) + i, static_cast<float>(m.data()[i]));
        };
        put(r.o, ref.o), put(r.dq, ref.dq), put(r.dk, ref.dk), put(r.dv, ref.dv);
        for (std::int64_t i = 0; i < p.seq_q; ++i) r.lse.set(h * p.seq_q + i, static_cast<float>(ref.lse[i]));
        dk_scale = std::max(dk_scale, ref.dk.cwiseAbs().maxCoeff());
      }
      const fa::Verification good = fa::verify_backward(p, data, r, true, 0, 1);
      CHECK_MESSAGE(good.ok(), p.describe());
      CHECK(good.error_vs_plain < fa::kPlainErrorMultiple);
      r.dk.set(5, r.dk.get(5) + static_cast<float>(0.1 * dk_scale));
      const fa::Verification bent = fa::verify_backward(p, data, r, true, 0, 1);
      CHECK(bent.reports[0].ok());     // dQ
      CHECK_FALSE(bent.reports[1].ok());  // dK
    }
}
