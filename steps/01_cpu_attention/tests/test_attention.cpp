// Stage 01 against the float64 loop at awkward shapes, closed-form cases, and its measured memory.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "01_cpu_attention/attention.hpp"
#include "fa/compare.hpp"
#include "fa/random.hpp"
#include "fa/reference.hpp"
#include "fa/stage.hpp"
#include "fa/testing.hpp"

namespace {

using fa::testing::problem;
using fa::testing::Shape;
constexpr const auto& kShapes = fa::testing::kAwkwardShapes;


struct Run {
  fa::AttentionResult out;
  std::int64_t workspace_peak = 0;
};

// Stage 01 on outputs poisoned with NaN, so that an element it does not write fails the checks.
Run run(const fa::Problem& p, const fa::AttentionData& in) {
  Run r{fa::AttentionResult(p)};
  fa::MemoryMeter meter;
  fa::step01::attention_forward(p, in.view(), r.out.view(), meter);
  r.workspace_peak = meter.peak();
  CHECK(meter.current() == 0);  // everything it allocated, it freed
  return r;
}

void check_against_f64(const fa::Problem& p, const fa::AttentionData& in, fa::Tolerance tol) {
  INFO(p.describe());
  const Run r = run(p, in);
  const fa::ReferenceF64 ref = fa::reference_attention_f64(p, in);
  const auto o = fa::compare("O", r.out.o.values(), ref.o, tol);
  const auto lse = fa::compare("LSE", r.out.lse.values(), ref.lse, tol);
  CHECK_MESSAGE(o.ok(), o.summary());
  CHECK_MESSAGE(lse.ok(), lse.summary());
}


}  // namespace

TEST_CASE("stage 01 matches the float64 loop at awkward shapes, causal and not") {
  std::uint64_t seed = 100;
  for (const Shape& s : kShapes)
    for (const bool causal : {false, true}) {
      const fa::Problem p = problem(s.nq, s.nk, s.d, causal);
      check_against_f64(p, fa::make_inputs(p, ++seed), fa::kFloat32Tol);
    }
}

TEST_CASE("stage 01 matches the float64 loop on ramp inputs") {
  for (const bool causal : {false, true}) {
    const fa::Problem p = problem(129, 77, 64, causal);
    check_against_f64(p, fa::make_inputs(p, 1, fa::InputKind::ramp), fa::kFloat32Tol);
  }
}

TEST_CASE("large logits (scores of 50 to 200) neither overflow nor lose more than their rounding") {
  // Why a wider tolerance (10x, fa::tolerance_for): float32 computes a score s with an absolute
  // error of about u·|s|·√D (u = 6e-8, the dot product's rounding), and exp turns an absolute
  // error in s into the same relative error of every weight P_ij. Scores of ~200 instead of ~2
  // make that ~100x larger: up to 1e-4 at D = 128 (measured), in any float32 implementation.
  // Without the max subtraction the same inputs give exp(200) = inf and NaN outputs, which no
  // tolerance lets through.
  const fa::Tolerance tol = fa::tolerance_for(fa::kFloat32Tol, fa::InputKind::large_logits);
  std::uint64_t seed = 300;
  for (const Shape& s : kShapes)
    for (const bool causal : {false, true}) {
      const fa::Problem p = problem(s.nq, s.nk, s.d, causal);
      check_against_f64(p, fa::make_inputs(p, ++seed, fa::InputKind::large_logits), tol);
    }
}

TEST_CASE("one key: every row that sees it gets exactly that key's V, and LSE = its score") {
  for (const bool causal : {false, true}) {
    fa::Problem p = problem(5, 1, 16, causal);  // causal: only the last query row sees the key
    const fa::AttentionData in = fa::make_inputs(p, 7);
    const Run r = run(p, in);
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t h = 0; h < p.heads; ++h)
        for (std::int64_t i = 0; i < p.seq_q; ++i) {
          const float lse = r.out.lse.at(b, h, i, 0);
          if (p.keys_visible(i) == 0) {
            CHECK(lse == -std::numeric_limits<float>::infinity());
            for (std::int64_t d = 0; d < p.dim; ++d) CHECK(r.out.o.at(b, h, i, d) == 0.0f);
            continue;
          }
          double score = 0;  // P = exp(0) / 1 = 1 exactly, so O is V exactly
          for (std::int64_t d = 0; d < p.dim; ++d) {
            CHECK(r.out.o.at(b, h, i, d) == in.v.at(b, h, 0, d));
            score += static_cast<double>(in.q.at(b, h, i, d)) * in.k.at(b, h, 0, d);
          }
          CHECK(lse == doctest::Approx(score * p.softmax_scale()).epsilon(1e-5));
        }
  }
}

TEST_CASE("equal scores: O is the mean of the visible V rows and LSE = log(keys seen)") {
  for (const bool causal : {false, true}) {
    const fa::Problem p = problem(9, 13, 32, causal);
    fa::AttentionData in = fa::make_inputs(p, 8);
    for (float& x : in.q.values()) x = 0.0f;  // every score is 0
    const Run r = run(p, in);
    for (std::int64_t i = 0; i < p.seq_q; ++i) {
      const std::int64_t n = p.keys_visible(i);
      CHECK(r.out.lse.at(1, 1, i, 0) == doctest::Approx(std::log(static_cast<double>(n))));
      for (std::int64_t d = 0; d < p.dim; ++d) {
        double mean = 0;
        for (std::int64_t j = 0; j < n; ++j) mean += in.v.at(1, 1, j, d) / static_cast<double>(n);
        CHECK(r.out.o.at(1, 1, i, d) == doctest::Approx(mean).epsilon(1e-5));
      }
    }
  }
}

TEST_CASE("P: rows sum to 1 over the visible keys, masked entries are 0, no-key rows are all 0") {
  const fa::Problem p = problem(40, 25, 16, true);  // Nq > Nk: rows 0..14 see no key
  const fa::AttentionData in = fa::make_inputs(p, 9);
  fa::MatrixRM S(p.seq_q, p.seq_k), P(p.seq_q, p.seq_k), O(p.seq_q, p.dim);
  std::vector<float> lse(static_cast<std::size_t>(p.seq_q));
  fa::step01::attention_head(p, in.q.head(1, 0), in.k.head(1, 0), in.v.head(1, 0),
                             fa::MapRM(S.data(), p.seq_q, p.seq_k), fa::MapRM(P.data(), p.seq_q, p.seq_k),
                             fa::MapRM(O.data(), p.seq_q, p.dim), lse.data());
  for (std::int64_t i = 0; i < p.seq_q; ++i) {
    INFO("row " << i);
    const std::int64_t visible = p.keys_visible(i);
    CHECK(P.row(i).minCoeff() >= 0.0f);
    CHECK(P.row(i).head(visible).sum() == doctest::Approx(visible ? 1.0 : 0.0).epsilon(1e-6));
    CHECK(P.row(i).tail(p.seq_k - visible).isZero(0.0f));
    if (visible == 0) {
      CHECK(std::isinf(lse[static_cast<std::size_t>(i)]));
      CHECK(lse[static_cast<std::size_t>(i)] < 0);
      CHECK(O.row(i).isZero(0.0f));
    }
  }
}

TEST_CASE("no NaN anywhere when early causal rows see no key (Nq > Nk)") {
  const fa::Problem p = problem(100, 30, 64, true);
  const Run r = run(p, fa::make_inputs(p, 10));
  for (float x : r.out.o.values()) REQUIRE(!std::isnan(x));
  for (float x : r.out.lse.values()) REQUIRE(!std::isnan(x));
  CHECK(r.out.lse.at(0, 0, 69, 0) == -std::numeric_limits<float>::infinity());  // sees key j <= -1
  CHECK(std::isfinite(r.out.lse.at(0, 0, 70, 0)));                              // sees key 0
}

TEST_CASE("the measured workspace is S and P: 2 * Nq * Nk * 4 bytes, for any B and H") {
  for (const Shape& s : kShapes) {
    const fa::Problem p = problem(s.nq, s.nk, s.d, false);
    INFO(p.describe());
    const Run r = run(p, fa::make_inputs(p, 11));
    CHECK(r.workspace_peak == 2 * s.nq * s.nk * static_cast<std::int64_t>(sizeof(float)));
  }
}

TEST_CASE("a memory limit smaller than S and P is an OutOfMemory, not a crash") {
  const fa::Problem p = problem(256, 256, 16, false);
  const fa::AttentionData in = fa::make_inputs(p, 12);
  fa::AttentionResult out(p);
  fa::MemoryMeter meter(256 * 256 * 4);  // room for S, not for P
  CHECK_THROWS_AS(fa::step01::attention_forward(p, in.view(), out.view(), meter), fa::OutOfMemory);
  CHECK(meter.current() == 0);
}
