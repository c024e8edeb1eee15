// Stage 02 against stage 01 and the float64 loop, at awkward and tile-boundary shapes, and its
// measured memory: a tile plus m and l per query row (O(N)), where stage 01's grows as N².
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "01_cpu_attention/attention.hpp"
#include "02_cpu_online_softmax/online_softmax.hpp"
#include "fa/compare.hpp"
#include "fa/random.hpp"
#include "fa/reference.hpp"
#include "fa/stage.hpp"
#include "fa/testing.hpp"

namespace {

using fa::testing::problem;
using fa::testing::Shape;
constexpr const auto& kShapes = fa::testing::kAwkwardShapes;

using fa::step02::kBc;
using fa::step02::kBr;

struct Run {
  fa::AttentionResult out;
  std::int64_t workspace_peak = 0;
};

// One stage's forward on outputs poisoned with NaN, so that an element it does not write fails.
Run run(fa::HostForward forward, const fa::Problem& p, const fa::AttentionData& in) {
  Run r{fa::AttentionResult(p)};
  fa::MemoryMeter meter;
  forward(p, in.view(), r.out.view(), meter);
  r.workspace_peak = meter.peak();
  CHECK(meter.current() == 0);
  return r;
}

// Stage 02 against the float64 loop and against stage 01 (the stage it replaces).
void check(const fa::Problem& p, const fa::AttentionData& in, fa::Tolerance tol) {
  INFO(p.describe());
  const Run ours = run(fa::step02::attention_forward, p, in);
  const Run before = run(fa::step01::attention_forward, p, in);
  const fa::ReferenceF64 ref = fa::reference_attention_f64(p, in);
  for (const auto& c : {fa::compare("O vs float64", ours.out.o.values(), ref.o, tol),
                        fa::compare("LSE vs float64", ours.out.lse.values(), ref.lse, tol),
                        fa::compare("O vs stage 01", ours.out.o.values(), before.out.o.values(), tol),
                        fa::compare("LSE vs stage 01", ours.out.lse.values(), before.out.lse.values(), tol)})
    CHECK_MESSAGE(c.ok(), c.summary());
}


}  // namespace

TEST_CASE("stage 02 matches float64 and stage 01 at awkward shapes, causal and not") {
  std::uint64_t seed = 200;
  for (const Shape& s : kShapes)
    for (const bool causal : {false, true}) {
      const fa::Problem p = problem(s.nq, s.nk, s.d, causal);
      check(p, fa::make_inputs(p, ++seed), fa::kFloat32Tol);
    }
}

TEST_CASE("tile boundaries: one key or row short of a tile, exactly a tile, one past it") {
  std::uint64_t seed = 400;
  for (const std::int64_t nk : {kBc - 1, kBc, kBc + 1, 2 * kBc + 1})
    for (const std::int64_t nq : {std::int64_t{1}, kBr - 1, kBr, kBr + 1})
      for (const bool causal : {false, true}) {
        const fa::Problem p = problem(nq, nk, 32, causal);
        check(p, fa::make_inputs(p, ++seed), fa::kFloat32Tol);
      }
}

TEST_CASE("ramp inputs") {
  for (const bool causal : {false, true}) {
    const fa::Problem p = problem(129, 200, 64, causal);
    check(p, fa::make_inputs(p, 1, fa::InputKind::ramp), fa::kFloat32Tol);
  }
}

TEST_CASE("large logits: the running max keeps every exponent <= 0, tile after tile") {
  // The same tolerance as stage 01's and for the same reason: float32 scores of ~200 carry an
  // absolute rounding error ~100x that of scores of ~2, which exp turns into a relative error of
  // the weights (about 1e-4 at D = 64). A new, larger max in a later tile is the case that a
  // missing rescale exp(m_old − m_new) gets wrong by a factor, not by 1e-4.
  const fa::Tolerance tol = fa::tolerance_for(fa::kFloat32Tol, fa::InputKind::large_logits);
  std::uint64_t seed = 500;
  for (const Shape& s : kShapes)
    for (const bool causal : {false, true}) {
      const fa::Problem p = problem(s.nq, s.nk, s.d, causal);
      check(p, fa::make_inputs(p, ++seed, fa::InputKind::large_logits), tol);
    }
}

TEST_CASE("the max arriving in the last tile: earlier tiles must be rescaled, not dropped") {
  // Keys grow along N, so each tile raises every row's running max.
  const fa::Problem p = problem(3, 5 * kBc + 7, 16, false);
  fa::AttentionData in = fa::make_inputs(p, 13);
  for (float& x : in.q.values()) x = 1.0f;
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads; ++h)
      for (std::int64_t j = 0; j < p.seq_k; ++j)
        for (std::int64_t d = 0; d < p.dim; ++d) in.k.at(b, h, j, d) = 0.02f * static_cast<float>(j);
  check(p, in, fa::kFloat32Tol);
}

TEST_CASE("rows that see no key (causal, Nq > Nk) give O = 0 and LSE = -inf, never NaN") {
  const fa::Problem p = problem(2 * kBr + 5, 30, 64, true);  // rows 0 .. Nq-Nk-1 see nothing
  const Run r = run(fa::step02::attention_forward, p, fa::make_inputs(p, 14));
  for (std::int64_t i = 0; i < p.seq_q; ++i) {
    INFO("row " << i);
    const float lse = r.out.lse.at(1, 1, i, 0);
    REQUIRE(!std::isnan(lse));
    if (p.keys_visible(i) == 0) {
      CHECK(lse == -std::numeric_limits<float>::infinity());
      for (std::int64_t d = 0; d < p.dim; ++d) CHECK(r.out.o.at(1, 1, i, d) == 0.0f);
    } else {
      CHECK(std::isfinite(lse));
    }
  }
}

TEST_CASE("the measured workspace is one tile and m, l for the Nq rows of a head") {
  for (const Shape& s : kShapes) {
    const fa::Problem p = problem(s.nq, s.nk, s.d, false);
    INFO(p.describe());
    const std::int64_t bytes = (kBr * kBc + 2 * s.nq) * static_cast<std::int64_t>(sizeof(float));
    CHECK(run(fa::step02::attention_forward, p, fa::make_inputs(p, 15)).workspace_peak == bytes);
  }
  // Doubling N: stage 01's workspace grows 4x (N²); stage 02's only by the 2·N floats of m and l.
  const fa::Problem n = problem(300, 300, 16, true), n2 = problem(600, 600, 16, true);
  const fa::AttentionData in_n = fa::make_inputs(n, 16), in_n2 = fa::make_inputs(n2, 16);
  const double ours = static_cast<double>(run(fa::step02::attention_forward, n2, in_n2).workspace_peak) /
                      static_cast<double>(run(fa::step02::attention_forward, n, in_n).workspace_peak);
  const double before = static_cast<double>(run(fa::step01::attention_forward, n2, in_n2).workspace_peak) /
                        static_cast<double>(run(fa::step01::attention_forward, n, in_n).workspace_peak);
  const double expected = (kBr * kBc + 2.0 * 600) / (kBr * kBc + 2.0 * 300);
  CHECK(ours == doctest::Approx(expected));
  CHECK(ours < 1.2);  // far from stage 01's 4x
  CHECK(before == 4.0);
}
