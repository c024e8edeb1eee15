// Exercise 04 — the checks of the fused kernel's online softmax: O and LSE against float64 at
// awkward shapes (N = 1, tails, Nq != Nk both ways, every D, causal on and off), large logits, a
// max that arrives in the last tile, and rows that see no key. They run stage 04's own kernel
// (flash_forward.cu), built against the starter's online_softmax_tile.cuh (exercises/) or the
// solution's (solutions/). Needs a CUDA device (exit 77 without one).
//   cmake --build build --target check_ex04
#include <doctest/doctest.h>

#include "04_cuda_flash_forward/flash_forward.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/random.hpp"
#include "fa/testing.hpp"

namespace {

using fa::testing::problem;

void check(const fa::Problem& p, const fa::AttentionData& in, fa::Tolerance tol) {
  INFO(p.describe());
  const auto r = fa::run_once(p, in, fa::step04::attention_forward);
  fa::testing::check_against_f64(p, in, r.out, tol, "ex04");
}

}  // namespace

TEST_CASE("ex04: one tile, several tiles, tails, every D, causal and not") {
  std::uint64_t seed = 40;
  for (const std::int64_t d : {32, 64, 128})
    for (const auto& [nq, nk] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {1, 77}, {77, 1}, {64, 64},
                                 {129, 200}, {200, 129}, {300, 300}})
      for (const bool causal : {false, true}) {
        const fa::Problem p = problem(nq, nk, d, causal, 2, 2);
        check(p, fa::make_inputs(p, ++seed), fa::kFloat32Tol);
      }
}

TEST_CASE("ex04: large logits (scores 50..200): exponents stay <= 0") {
  for (const bool causal : {false, true}) {
    const fa::Problem p = problem(129, 300, 64, causal, 1, 2);
    check(p, fa::make_inputs(p, 41, fa::InputKind::large_logits), fa::Tolerance{2e-4, 2e-4});
  }
}

TEST_CASE("ex04: the max arriving in the last tile: the earlier tiles are rescaled by alpha") {
  const fa::Problem p = problem(3, 5 * 64 + 7, 64, false, 1, 1);
  fa::AttentionData in = fa::make_inputs(p, 42);
  for (float& x : in.q.values()) x = 1.0f;
  for (std::int64_t j = 0; j < p.seq_k; ++j)
    for (std::int64_t d = 0; d < p.dim; ++d) in.k.at(0, 0, j, d) = 0.02f * static_cast<float>(j);
  check(p, in, fa::Tolerance{2e-4, 2e-4});
}

TEST_CASE("ex04: rows that see no key (causal, Nq > Nk): O = 0 and LSE = -inf, never NaN") {
  const fa::Problem p = problem(133, 30, 64, true, 1, 2);
  const fa::AttentionData in = fa::make_inputs(p, 43);
  const auto r = fa::run_once(p, in, fa::step04::attention_forward);
  fa::testing::check_empty_rows(p, r.out);
  fa::testing::check_against_f64(p, in, r.out, fa::kFloat32Tol, "ex04");
}
