#include <doctest/doctest.h>

#include <cmath>

#include "fa/random.hpp"
#include "fa/reference.hpp"

TEST_CASE("float64 reference: one key gives V, equal scores give the mean of V") {
  fa::Problem p;
  p.seq_q = 3, p.seq_k = 1, p.dim = 4;
  auto in = fa::make_inputs(p, 1);
  auto ref = fa::reference_attention_f64(p, in);
  for (int i = 0; i < 3; ++i)
    for (int d = 0; d < 4; ++d) CHECK(ref.o[i * 4 + d] == doctest::Approx(in.v.at(0, 0, 0, d)));

  p.seq_k = 5;
  in = fa::make_inputs(p, 2);
  for (float& x : in.q.values()) x = 0.0f;  // all scores 0: uniform weights
  ref = fa::reference_attention_f64(p, in);
  for (int d = 0; d < 4; ++d) {
    double mean = 0;
    for (int j = 0; j < 5; ++j) mean += in.v.at(0, 0, j, d) / 5.0;
    CHECK(ref.o[d] == doctest::Approx(mean));
  }
  CHECK(ref.lse[0] == doctest::Approx(std::log(5.0)));
}

TEST_CASE("rows that see no key give 0 and -inf") {
  fa::Problem p;
  p.causal = true;
  p.seq_q = 4, p.seq_k = 2, p.dim = 2;
  const auto in = fa::make_inputs(p, 3);
  const auto ref = fa::reference_attention_f64(p, in);
  CHECK(std::isinf(ref.lse[0]));
  CHECK(ref.lse[0] < 0);
  CHECK(ref.o[0] == 0.0);
  CHECK(std::isfinite(ref.lse[3]));
}

TEST_CASE("a one-row problem reproduces that row of the full problem") {
  fa::Problem p;
  p.batch = 2, p.heads = 2, p.seq_q = 7, p.seq_k = 9, p.dim = 8, p.causal = true;
  const auto in = fa::make_inputs(p, 4);
  const auto full = fa::reference_attention_f64(p, in);
  for (const fa::RowId& r : fa::sample_rows(p, 10, 1)) {
    if (p.keys_visible(r.i) == 0) continue;
    const auto one = fa::one_row_problem(p, r);
    const auto sub = fa::reference_attention_f64(one, fa::one_row_inputs(p, in, r));
    const std::int64_t row = (r.b * p.heads + r.h) * p.seq_q + r.i;
    CHECK(sub.lse[0] == doctest::Approx(full.lse[row]));
    for (int d = 0; d < 8; ++d) CHECK(sub.o[d] == doctest::Approx(full.o[row * 8 + d]));
  }
}

TEST_CASE("sampled rows include the edges") {
  fa::Problem p;
  p.batch = 2, p.heads = 3, p.seq_q = 100;
  const auto rows = fa::sample_rows(p, 5, 9);
  bool first = false, last = false;
  for (const auto& r : rows) {
    first |= (r.b == 0 && r.h == 0 && r.i == 0);
    last |= (r.b == 1 && r.h == 2 && r.i == 99);
  }
  CHECK(first);
  CHECK(last);
}
