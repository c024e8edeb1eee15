#include <doctest/doctest.h>

#include <cmath>

#include "fa/problem.hpp"

using fa::Problem;

TEST_CASE("default scale is 1/sqrt(D), an explicit scale wins") {
  Problem p;
  p.dim = 64;
  CHECK(p.softmax_scale() == doctest::Approx(0.125));
  p.scale = 0.5f;
  CHECK(p.softmax_scale() == 0.5f);
}

TEST_CASE("causal visibility is aligned to the bottom-right corner") {
  Problem p;
  p.causal = true;
  p.seq_q = p.seq_k = 4;
  CHECK(p.keys_visible(0) == 1);
  CHECK(p.keys_visible(3) == 4);
  CHECK(p.visible(2, 2));
  CHECK_FALSE(p.visible(2, 3));

  p.seq_q = 2;  // the last two queries of a 5-token sequence
  p.seq_k = 5;
  CHECK(p.keys_visible(0) == 4);
  CHECK(p.keys_visible(1) == 5);

  p.seq_q = 5;  // more queries than keys: the first rows see nothing
  p.seq_k = 2;
  CHECK(p.keys_visible(0) == 0);
  CHECK(p.keys_visible(2) == 0);
  CHECK(p.keys_visible(3) == 1);
  CHECK(p.keys_visible(4) == 2);
}

TEST_CASE("FLOPs follow the papers' convention") {
  Problem p;
  p.batch = 2;
  p.heads = 3;
  p.seq_q = p.seq_k = 128;
  p.dim = 64;
  const double full = 4.0 * 2 * 3 * 128 * 128 * 64;
  CHECK(p.flops_forward() == full);
  CHECK(p.flops_backward() == 2.5 * full);
  p.causal = true;
  CHECK(p.flops_forward() == 0.5 * full);
  p.seq_q = 2;  // Nq != Nk: the visible pairs exactly (127 + 128 keys)
  CHECK(p.flops_forward() == 4.0 * 2 * 3 * (127 + 128) * 64);
}

TEST_CASE("validate rejects shapes no stage can run") {
  Problem p;
  CHECK_NOTHROW(p.validate());
  p.dim = 0;
  CHECK_THROWS_AS(p.validate(), fa::UsageError);
  p.dim = 64;
  p.scale = NAN;
  CHECK_THROWS_AS(p.validate(), fa::UsageError);
}
