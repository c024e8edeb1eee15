// Stage 04 against the float64 loop and stage 03 at awkward shapes (N = 1, tails of every kind,
// Nq != Nk both ways, every D, causal on and off, large logits), and its measured memory: zero
// beyond Q, K, V, O and LSE, where stage 03's grows as N².
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "04_cuda_flash_forward/flash_forward.cuh"
#include "04_cuda_flash_forward/flash_forward_kernel.cuh"
#include "fa/compare.hpp"
#include "fa/cuda/shared_memory.cuh"
#include "fa/random.hpp"
#include "fa/stage.hpp"
#include "fa/testing.hpp"
#ifdef FA_HAVE_STEP03
#include "03_cuda_naive/naive_attention.cuh"
#endif

namespace {

using fa::testing::problem;
using fa::step04::kBc;
using fa::step04::kBr;

// Stage 04 against float64 (every element) and against stage 03 (the stage it replaces).
void check(const fa::Problem& p, const fa::AttentionData& in, fa::Tolerance tol) {
  INFO(p.describe());
  const auto ours = fa::run_once(p, in, fa::step04::attention_forward);
  CHECK(ours.extra_bytes == 0);
  fa::testing::check_against_f64(p, in, ours.out, tol, "stage 04");
  fa::testing::check_verified(p, in, ours.out, "stage 04");
#ifdef FA_HAVE_STEP03
  const auto before = fa::run_once(p, in, fa::step03::attention_forward_naive);
  for (const auto& c : {fa::compare("O vs stage 03", ours.out.o.to_float(), before.out.o.to_float(), tol),
                        fa::compare("LSE vs stage 03", ours.out.lse.to_float(), before.out.lse.to_float(), tol)})
    CHECK_MESSAGE(c.ok(), c.summary());
#endif
}

// The head dims this GPU runs: all three on an Ampere or Hopper GPU; on a Turing T4 (64 KiB of
// shared memory per block) D = 32 and 64, and D = 128 (112 KiB) is refused (the case below).
std::vector<std::int64_t> dims_here() {
  std::vector<std::int64_t> dims;
  for (const std::int64_t d : {32, 64, 128})
    if (fa::step04::device_refusal(problem(64, 64, d, false), "04").empty()) dims.push_back(d);
  return dims;
}

struct Shape {
  std::int64_t nq, nk;
};
// N = 1; no multiple of 64; one short of, exactly, one past a tile; Nq != Nk both ways.
const Shape kShapes[] = {{1, 1},   {1, 77},   {77, 1},   {77, 77},  {129, 129}, {129, 77},
                         {77, 129}, {200, 33}, {33, 200}, {63, 65},  {64, 64},   {65, 128}};

}  // namespace

TEST_CASE("stage 04 matches float64 (and stage 03) at awkward shapes, every D, causal and not") {
  std::uint64_t seed = 4000;
  for (const std::int64_t d : dims_here())
    for (const Shape& s : kShapes)
      for (const bool causal : {false, true}) {
        const fa::Problem p = problem(s.nq, s.nk, d, causal, 2, 2);
        check(p, fa::make_inputs(p, ++seed), fa::kFloat32Tol);
      }
}

TEST_CASE("longer tails: N = 1000 and 1000 x 333, several K/V tiles per block") {
  std::uint64_t seed = 4100;
  for (const std::int64_t d : dims_here())
    for (const bool causal : {false, true}) {
      const fa::Problem p = problem(1000, 1000, d, causal, 1, 2);
      check(p, fa::make_inputs(p, ++seed), fa::kFloat32Tol);
      const fa::Problem r = problem(1000, 333, d, causal, 1, 1);
      check(r, fa::make_inputs(r, ++seed), fa::kFloat32Tol);
    }
}

TEST_CASE("ramp inputs") {
  for (const bool causal : {false, true}) {
    const fa::Problem p = problem(129, 200, 64, causal, 1, 3);
    check(p, fa::make_inputs(p, 1, fa::InputKind::ramp), fa::kFloat32Tol);
  }
}

TEST_CASE("large logits (scores 50..200): the running max keeps every exponent <= 0") {
  // The same tolerance as stages 01 and 02 and for the same reason: scores of ~200 carry an
  // absolute float32 rounding error ~100x that of scores of ~2, which exp turns into a relative
  // error of the weights near 1e-4. A missing rescale is wrong by a factor, not by 1e-4.
  const fa::Tolerance tol{2e-4, 2e-4};
  std::uint64_t seed = 4200;
  for (const std::int64_t d : dims_here())
    for (const Shape& s : {Shape{77, 77}, Shape{129, 300}, Shape{300, 129}, Shape{1, 200}})
      for (const bool causal : {false, true}) {
        const fa::Problem p = problem(s.nq, s.nk, d, causal, 1, 2);
        check(p, fa::make_inputs(p, ++seed, fa::InputKind::large_logits), tol);
      }
}

TEST_CASE("the max arriving in the last tile: earlier tiles must be rescaled, not dropped") {
  // Keys grow along N (scores 0.16·j, up to 52), so each tile raises every row's running max. Those
  // are large logits: the large-logit tolerance (see below); a dropped rescale is off by a factor.
  const fa::Problem p = problem(3, 5 * kBc + 7, 64, false, 1, 2);
  fa::AttentionData in = fa::make_inputs(p, 13);
  for (float& x : in.q.values()) x = 1.0f;
  for (std::int64_t h = 0; h < p.heads; ++h)
    for (std::int64_t j = 0; j < p.seq_k; ++j)
      for (std::int64_t d = 0; d < p.dim; ++d) in.k.at(0, h, j, d) = 0.02f * static_cast<float>(j);
  check(p, in, fa::Tolerance{2e-4, 2e-4});
}

TEST_CASE("rows that see no key (causal, Nq > Nk) give O = 0 and LSE = -inf, never NaN") {
  for (const std::int64_t d : dims_here()) {
    const fa::Problem p = problem(2 * kBr + 5, 30, d, true, 1, 2);  // rows 0 .. Nq-Nk-1 see nothing
    const fa::AttentionData in = fa::make_inputs(p, 14);
    const auto r = fa::run_once(p, in, fa::step04::attention_forward);
    fa::testing::check_empty_rows(p, r.out);
    fa::testing::check_against_f64(p, in, r.out, fa::kFloat32Tol, "stage 04");
  }
}

TEST_CASE("a head dim whose tiles do not fit this GPU's shared memory is a UsageError, not a failed launch") {
  const std::vector<std::int64_t> here = dims_here();
  // 227 KiB per block (Hopper): every D fits. Below it, each D left out must be refused.
  if (fa::shared_memory_per_block_optin() >= 227 * 1024) CHECK(here.size() == 3);
  for (const std::int64_t d : {32, 64, 128}) {
    if (std::find(here.begin(), here.end(), d) != here.end()) continue;
    const fa::Problem p = problem(8, 8, d, false, 1, 1);
    CHECK_THROWS_AS(fa::run_once(p, fa::make_inputs(p, 15), fa::step04::attention_forward), fa::UsageError);
  }
}

TEST_CASE("an unsupported head dim is a UsageError (exit 2 in the executable), not a wrong answer") {
  for (const std::int64_t d : {16, 48, 96, 256}) {
    const fa::Problem p = problem(8, 8, d, false, 1, 1);
    const fa::AttentionData in = fa::make_inputs(p, 15);
    CHECK_THROWS_AS(fa::run_once(p, in, fa::step04::attention_forward), fa::UsageError);
  }
}

TEST_CASE("the same inputs give the same bits twice (no race between the tile loads and the reads)") {
  for (const bool causal : {false, true}) {
    const fa::Problem p = problem(517, 700, dims_here().back(), causal, 2, 3);  // D = 128 where it runs
    const fa::AttentionData in = fa::make_inputs(p, 16);
    const auto a = fa::run_once(p, in, fa::step04::attention_forward);
    const auto b = fa::run_once(p, in, fa::step04::attention_forward);
    CHECK(std::memcmp(a.out.o.raw(), b.out.o.raw(), a.out.o.bytes()) == 0);
    CHECK(std::memcmp(a.out.lse.raw(), b.out.lse.raw(), a.out.lse.bytes()) == 0);
  }
}

TEST_CASE("a long head, verified on sampled rows against float64 (any N: each row needs only K and V)") {
  for (const bool causal : {false, true}) {
    const fa::Problem p = problem(4099, 4099, 64, causal, 1, 2);
    const fa::AttentionData in = fa::make_inputs(p, 17);
    const auto r = fa::run_once(p, in, fa::step04::attention_forward);
    fa::VerifyPlan sampled;
    sampled.max_full_flops = 0;  // 64 sampled rows (and the edges), float64 and a plain float32 on each
    sampled.sampled_rows = 64;
    const fa::Verification v = fa::verify_forward(p, in, r.out, sampled, 17);
    for (const fa::CompareReport& c : v.reports) CHECK_MESSAGE(c.ok(), c.summary());
  }
}

TEST_CASE("memory beyond Q, K, V, O, LSE: zero for stage 04 at every N (measured)") {
  for (const std::int64_t n : {1, 77, 512, 2048}) {
    const fa::Problem p = problem(n, n, 64, true, 1, 4);
    CHECK(fa::run_once(p, fa::make_inputs(p, 18), fa::step04::attention_forward).extra_bytes == 0);
  }
#ifdef FA_HAVE_STEP03
  // Stage 03 beside it: S and P, [B,H,Nq,Nk] each; doubling N multiplies its memory by 4.
  const fa::Problem n1 = problem(512, 512, 64, false, 1, 4), n2 = problem(1024, 1024, 64, false, 1, 4);
  const auto a = fa::run_once(n1, fa::make_inputs(n1, 19), fa::step03::attention_forward_naive);
  const auto b = fa::run_once(n2, fa::make_inputs(n2, 19), fa::step03::attention_forward_naive);
  CHECK(a.extra_bytes >= 2 * 4 * 512 * 512 * 4);
  CHECK(static_cast<double>(b.extra_bytes) / static_cast<double>(a.extra_bytes) == doctest::Approx(4.0).epsilon(0.01));
#endif
}
