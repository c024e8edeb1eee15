// Exercise 01 — the checks, in the order of the holes: S, then P and LSE, then O. They run stage
// 01's own code (attention.cpp), built against the starter's hole attention_head.hpp
// (exercises/01_cpu_attention/) or the solution's (solutions/01_cpu_attention/).
//   cmake --build build --target check_ex01
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "01_cpu_attention/attention.hpp"  // stage 01, built against the hole attention_head.hpp
#include "fa/compare.hpp"
#include "fa/exercise.hpp"
#include "fa/random.hpp"
#include "fa/reference.hpp"
#include "fa/stage.hpp"

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

fa::Problem problem(std::int64_t nq, std::int64_t nk, std::int64_t d, bool causal, std::int64_t bh = 1) {
  fa::Problem p;
  p.heads = bh;
  p.seq_q = nq;
  p.seq_k = nk;
  p.dim = d;
  p.causal = causal;
  return p;
}

// One head's buffers, poisoned with NaN so that whatever is not written fails the checks.
struct Head {
  fa::MatrixRM S, P, O;
  std::vector<float> lse;
  explicit Head(const fa::Problem& p)
      : S(fa::MatrixRM::Constant(p.seq_q, p.seq_k, kNaN)), P(S), O(fa::MatrixRM::Constant(p.seq_q, p.dim, kNaN)),
        lse(static_cast<std::size_t>(p.seq_q), kNaN) {}
};

// Runs attention_head on head 0. Returns the message of the TODO it stopped at, if any: a check
// of S passes while the later holes are still TODOs.
std::string run_head(const fa::Problem& p, const fa::AttentionData& in, Head& h) {
  try {
    fa::step01::attention_head(p, in.q.head(0, 0), in.k.head(0, 0), in.v.head(0, 0),
                             fa::MapRM(h.S.data(), p.seq_q, p.seq_k), fa::MapRM(h.P.data(), p.seq_q, p.seq_k),
                             fa::MapRM(h.O.data(), p.seq_q, p.dim), h.lse.data());
  } catch (const fa::TodoNotDone& e) {
    return std::string("attention_head stopped at ") + e.what();
  }
  return "attention_head ran to the end";
}

// S and P of head 0 in float64, straight from the definition.
void reference_s_p(const fa::Problem& p, const fa::AttentionData& in, std::vector<double>& s,
                   std::vector<double>& prob) {
  s.assign(static_cast<std::size_t>(p.seq_q * p.seq_k), 0.0);
  prob = s;
  for (std::int64_t i = 0; i < p.seq_q; ++i) {
    for (std::int64_t j = 0; j < p.seq_k; ++j) {
      double dot = 0;
      for (std::int64_t d = 0; d < p.dim; ++d) dot += static_cast<double>(in.q.at(0, 0, i, d)) * in.k.at(0, 0, j, d);
      s[i * p.seq_k + j] = p.softmax_scale() * dot;
    }
    const std::int64_t visible = p.keys_visible(i);
    double m = -INFINITY, l = 0;
    for (std::int64_t j = 0; j < visible; ++j) m = std::fmax(m, s[i * p.seq_k + j]);
    for (std::int64_t j = 0; j < visible; ++j) l += std::exp(s[i * p.seq_k + j] - m);
    for (std::int64_t j = 0; j < visible; ++j) prob[i * p.seq_k + j] = std::exp(s[i * p.seq_k + j] - m) / l;
  }
}

std::vector<float> values(const fa::MatrixRM& m) { return std::vector<float>(m.data(), m.data() + m.size()); }

// The whole forward on NaN-poisoned outputs, against the float64 loop.
void check_forward(const fa::Problem& p, const fa::AttentionData& in, fa::Tolerance tol) {
  INFO(p.describe());
  fa::AttentionResult out(p);
  fa::MemoryMeter meter;
  fa::step01::attention_forward(p, in.view(), out.view(), meter);
  const fa::ReferenceF64 ref = fa::reference_attention_f64(p, in);
  const auto o = fa::compare("O", out.o.values(), ref.o, tol, fa::index_in({p.batch, p.heads, p.seq_q, p.dim}));
  const auto lse = fa::compare("LSE", out.lse.values(), ref.lse, tol, fa::index_in({p.batch, p.heads, p.seq_q}));
  CHECK_MESSAGE(o.ok(), o.summary());
  CHECK_MESSAGE(lse.ok(), lse.summary());
}

}  // namespace

TEST_CASE("ex01:scores — S = scale * Q K^T") {
  const fa::Problem p = problem(7, 11, 16, false);
  const fa::AttentionData in = fa::make_inputs(p, 1);
  Head h(p);
  const std::string ran = run_head(p, in, h);
  INFO(ran);
  std::vector<double> s, prob;
  reference_s_p(p, in, s, prob);
  const auto c = fa::compare("S", values(h.S), s, fa::kFloat32Tol, fa::index_in({p.seq_q, p.seq_k}));
  CHECK_MESSAGE(c.ok(), c.summary());
}

TEST_CASE("ex01:softmax — P = softmax(S) over the visible keys, LSE = m + log(l)") {
  // Causal with Nq > Nk: rows 0..2 see no key, the others see a growing prefix of the keys.
  const fa::Problem p = problem(9, 6, 16, true);
  const fa::AttentionData in = fa::make_inputs(p, 2);
  Head h(p);
  const std::string ran = run_head(p, in, h);
  INFO(ran);
  std::vector<double> s, prob;
  reference_s_p(p, in, s, prob);
  const auto c = fa::compare("P", values(h.P), prob, fa::kFloat32Tol, fa::index_in({p.seq_q, p.seq_k}));
  CHECK_MESSAGE(c.ok(), c.summary());
  const fa::ReferenceF64 ref = fa::reference_attention_f64(p, in);
  const auto lse = fa::compare("LSE", h.lse, ref.lse, fa::kFloat32Tol, fa::index_in({p.seq_q}));
  CHECK_MESSAGE(lse.ok(), lse.summary());
}

TEST_CASE("ex01:softmax — large scores (50 to 200) do not overflow: subtract the row max") {
  const fa::Problem p = problem(5, 8, 64, false);
  const fa::AttentionData in = fa::make_inputs(p, 3, fa::InputKind::large_logits);
  Head h(p);
  const std::string ran = run_head(p, in, h);
  INFO(ran);
  std::vector<double> s, prob;
  reference_s_p(p, in, s, prob);
  const auto c = fa::compare("P", values(h.P), prob, fa::tolerance_for(fa::kFloat32Tol, fa::InputKind::large_logits),
                             fa::index_in({p.seq_q, p.seq_k}));
  CHECK_MESSAGE(c.ok(), c.summary());
}

TEST_CASE("ex01:output — O = P V: the whole forward against float64") {
  // N = 1, lengths that are no multiple of anything, Nq != Nk both ways, causal on and off.
  const std::int64_t shapes[][3] = {{1, 1, 16}, {5, 5, 16}, {77, 129, 32}, {129, 77, 64}, {40, 25, 128}};
  std::uint64_t seed = 10;
  for (const auto& s : shapes)
    for (const bool causal : {false, true}) {
      const fa::Problem p = problem(s[0], s[1], s[2], causal, /*bh=*/3);
      check_forward(p, fa::make_inputs(p, ++seed), fa::kFloat32Tol);
    }
  const fa::Problem p = problem(33, 50, 64, true, 2);
  check_forward(p, fa::make_inputs(p, 20, fa::InputKind::large_logits),
                fa::tolerance_for(fa::kFloat32Tol, fa::InputKind::large_logits));
}

TEST_CASE("the workspace that the meter measures is S and P: 2 * Nq * Nk * 4 bytes") {
  const fa::Problem p = problem(100, 60, 16, false, 2);
  const fa::AttentionData in = fa::make_inputs(p, 30);
  fa::AttentionResult out(p);
  fa::MemoryMeter meter;
  fa::step01::attention_forward(p, in.view(), out.view(), meter);
  CHECK(meter.peak() == 2 * 100 * 60 * 4);
}
