#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "fa/random.hpp"

TEST_CASE("same seed, same inputs; another seed, other inputs") {
  fa::Problem p;
  p.batch = 1, p.heads = 2, p.seq_q = 17, p.seq_k = 33, p.dim = 16;
  const auto a = fa::make_inputs(p, 5), b = fa::make_inputs(p, 5), c = fa::make_inputs(p, 6);
  CHECK(a.q.to_float() == b.q.to_float());
  CHECK(a.v.to_float() == b.v.to_float());
  CHECK(a.q.to_float() != c.q.to_float());
  CHECK(a.k.shape() == fa::Shape4{1, 2, 33, 16});
}

TEST_CASE("normal inputs have a non-zero mean") {
  fa::Problem p;
  p.seq_q = p.seq_k = 256, p.dim = 64;
  const auto in = fa::make_inputs(p, 1);
  double sum = 0;
  for (float x : in.q.values()) sum += x;
  CHECK(sum / in.q.numel() == doctest::Approx(0.5).epsilon(0.05));
}

TEST_CASE("large-logit inputs give scores of order 50..200") {
  fa::Problem p;
  p.seq_q = p.seq_k = 64, p.dim = 64;
  const auto in = fa::make_inputs(p, 3, fa::InputKind::large_logits);
  double lo = 1e30, hi = -1e30;
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 64; ++j) {
      double s = 0;
      for (int d = 0; d < 64; ++d) s += in.q.at(0, 0, i, d) * in.k.at(0, 0, j, d);
      s *= p.softmax_scale();
      lo = std::fmin(lo, s), hi = std::fmax(hi, s);
    }
  CHECK(lo > 30);
  CHECK(hi > 120);
  CHECK(hi < 400);
}

TEST_CASE("input kinds parse by name") {
  CHECK(fa::parse_input_kind("ramp") == fa::InputKind::ramp);
  CHECK_THROWS_AS(fa::parse_input_kind("zeros"), fa::UsageError);
}

TEST_CASE("a large tensor drawn on every core holds the numbers of one loop, and leaves the generator where the loop does") {
  // Odd sizes on purpose: the pair that Box-Muller draws is split across tensors, so the second
  // tensor starts with the spare half of the first one's last pair.
  for (const std::int64_t n : {std::int64_t{7}, std::int64_t{(1 << 21) + 3}}) {
    fa::HostTensor a(fa::Shape4{1, 1, n, 1}), b(fa::Shape4{1, 1, n, 1});
    fa::Rng parallel(11), serial(11);
    fa::fill_normal(a, parallel, 0.5, 1.0);
    fa::fill_normal(b, parallel, 0.5, 1.0);
    std::vector<float> expected(static_cast<std::size_t>(2 * n));
    for (float& x : expected) x = static_cast<float>(serial.normal(0.5, 1.0));
    std::vector<float> got(a.values().begin(), a.values().end());
    got.insert(got.end(), b.values().begin(), b.values().end());
    CAPTURE(n);
    CHECK(got == expected);
    CHECK(parallel.has_spare() == serial.has_spare());
    CHECK(parallel.normal(0.0, 1.0) == serial.normal(0.0, 1.0));
    CHECK(parallel.normal(0.0, 1.0) == serial.normal(0.0, 1.0));
  }
}
