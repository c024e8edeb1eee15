// Stage 04's ladder (ladder/ladder.cuh): every rung against the float64 loop at the awkward shapes
// (N = 1, tails of every kind, Nq != Nk both ways, D = 32, 64, 128, causal on and off, large
// logits, rows that see no key), every element, with a fixed tolerance and with the rule of
// docs/tolerance.md; and against the rung below it on every row (twice the bound: both are within
// it). v1's rung below is stage 03 naive, where stage 03 is in the tree; the top rung is the
// stage's kernel, tested on its own in test_flash_forward.cu and here as the last rung.
#include <doctest/doctest.h>

#include <cstring>
#include <iterator>
#include <optional>
#include <string>

#include "04_cuda_flash_forward/flash_forward_kernel.cuh"
#include "04_cuda_flash_forward/ladder/ladder.cuh"
#include "04_cuda_flash_forward/ladder/v1_algorithm1.cuh"
#include "fa/cuda/shared_memory.cuh"
#include "fa/compare.hpp"
#include "fa/random.hpp"
#include "fa/stage.hpp"
#include "fa/testing.hpp"
#include "fa/verify.hpp"
#ifdef FA_HAVE_STEP03
#include "03_cuda_naive/naive_attention.cuh"
#endif

namespace {

using fa::step04::ladder::kLadder;
using fa::testing::problem;
constexpr int kRungs = static_cast<int>(std::size(kLadder));
constexpr std::int64_t kDims[] = {32, 64, 128};

// Whether rung k's tiles at head dim d fit in the shared memory this GPU gives one block. On a
// Turing T4 (64 KiB) v1 runs D = 32 only and the other rungs D = 32 and 64: there a rung refuses
// the rest with one line (a UsageError), and these checks leave those cases out.
bool fits_here(int k, std::int64_t d) {
  namespace v1 = fa::step04::ladder::v1;
  const int need = k == 0 ? (d == 32 ? v1::smem_bytes<32>() : d == 64 ? v1::smem_bytes<64>() : v1::smem_bytes<128>())
                          : (d == 32 ? fa::step04::smem_bytes<32>()
                                     : d == 64 ? fa::step04::smem_bytes<64>() : fa::step04::smem_bytes<128>());
  return fa::shared_memory_refusal(need, "").empty();
}

// The rung below rung k: rung k − 1, or for v1 stage 03 naive (where it is built).
std::optional<fa::PreviousStage> below(int k, std::int64_t d) {
  if (k > 0 && !fits_here(k - 1, d)) return std::nullopt;
  if (k > 0) return fa::PreviousStage{std::string("04 ") + kLadder[k - 1].name, fa::gpu_forward(kLadder[k - 1].forward)};
#ifdef FA_HAVE_STEP03
  return fa::PreviousStage{"03 naive", fa::gpu_forward(fa::step03::attention_forward_naive)};
#else
  return std::nullopt;
#endif
}

// Rung k on one case: float64 on every element (fixed tolerance), float64 on every row with the
// measured tolerance, and the rung below on every row. No memory beyond the five tensors.
void check_rung(int k, const fa::Problem& p, const fa::AttentionData& in, fa::Tolerance tol) {
  if (!fits_here(k, p.dim)) return;
  const char* name = kLadder[k].name;
  INFO(name << ": " << p.describe());
  const auto r = fa::run_once(p, in, kLadder[k].forward);
  CHECK(r.extra_bytes == 0);
  fa::testing::check_against_f64(p, in, r.out, tol, name);
  fa::VerifyPlan plan;
  plan.max_full_flops = 1e30;
  plan.previous = below(k, p.dim);
  const fa::Verification v = fa::verify_forward(p, in, r.out, plan, 0);
  for (const fa::CompareReport& c : v.reports) CHECK_MESSAGE(c.ok(), name << ": " << c.summary());
  if (plan.previous) CHECK_MESSAGE(v.against.find(plan.previous->name + " (all rows)") != std::string::npos, v.against);
}

void check_every_rung(const fa::Problem& p, const fa::AttentionData& in, fa::Tolerance tol) {
  for (int k = 0; k < kRungs; ++k) check_rung(k, p, in, tol);
}

}  // namespace

TEST_CASE("the ladder: v1_algorithm1 .. v4_cp_async, then the stage's kernel `flash` on top") {
  // The variant names in the results; the plot tool charts vN_ names as a progression up to `flash`.
  REQUIRE(kRungs == 5);
  for (int k = 0; k + 1 < kRungs; ++k) {
    const std::string name = kLadder[k].name;  // "v<k+1>_..."
    CHECK_MESSAGE((name.size() > 3 && name[0] == 'v' && name[1] == '1' + k && name[2] == '_'), name);
  }
  CHECK(std::string(kLadder[kRungs - 1].name) == "flash");
  const bool top_is_the_stage = kLadder[kRungs - 1].forward == &fa::step04::attention_forward;
  CHECK(top_is_the_stage);
}

TEST_CASE("every rung matches float64 and the rung below at the awkward shapes, every D, causal and not") {
  // The grid of every stage (fa/testing.hpp), each (Nq, Nk) at every D this stage compiles.
  std::uint64_t seed = 4400;
  for (const fa::testing::Shape& s : fa::testing::kAwkwardShapes)
    for (const std::int64_t d : kDims)
      for (const bool causal : {false, true}) {
        const fa::Problem p = problem(s.nq, s.nk, d, causal);
        check_every_rung(p, fa::make_inputs(p, ++seed), fa::kFloat32Tol);
      }
}

TEST_CASE("several K/V tiles and Q tiles: one short of, exactly, one past a tile; long tails") {
  struct Shape {
    std::int64_t nq, nk;
  };
  std::uint64_t seed = 4500;
  for (const Shape& s : {Shape{63, 65}, Shape{64, 64}, Shape{65, 128}, Shape{129, 300}, Shape{300, 129}, Shape{1000, 333}})
    for (const std::int64_t d : kDims)
      for (const bool causal : {false, true}) {
        const fa::Problem p = problem(s.nq, s.nk, d, causal, 1, 2);
        check_every_rung(p, fa::make_inputs(p, ++seed), fa::kFloat32Tol);
      }
}

TEST_CASE("large logits (scores 50..200): every rung keeps every exponent <= 0") {
  // The tolerance of stages 01, 02 and 04 for these inputs (test_flash_forward.cu says why).
  const fa::Tolerance tol{2e-4, 2e-4};
  struct Shape {
    std::int64_t nq, nk;
  };
  std::uint64_t seed = 4600;
  for (const std::int64_t d : kDims)
    for (const Shape& s : {Shape{77, 77}, Shape{129, 300}, Shape{300, 129}, Shape{1, 200}})
      for (const bool causal : {false, true}) {
        const fa::Problem p = problem(s.nq, s.nk, d, causal, 1, 2);
        check_every_rung(p, fa::make_inputs(p, ++seed, fa::InputKind::large_logits), tol);
      }
}

TEST_CASE("the max arriving in the last tile: every rung rescales the earlier tiles") {
  // Keys grow along N (scores 0.16·j, up to 52): each tile raises every row's running max.
  const fa::Problem p = problem(3, 5 * 64 + 7, 64, false, 1, 2);
  fa::AttentionData in = fa::make_inputs(p, 13);
  for (float& x : in.q.values()) x = 1.0f;
  for (std::int64_t h = 0; h < p.heads; ++h)
    for (std::int64_t j = 0; j < p.seq_k; ++j)
      for (std::int64_t d = 0; d < p.dim; ++d) in.k.at(0, h, j, d) = 0.02f * static_cast<float>(j);
  check_every_rung(p, in, fa::Tolerance{2e-4, 2e-4});
}

TEST_CASE("rows that see no key (causal, Nq > Nk): O = 0 and LSE = -inf on every rung, never NaN") {
  for (const std::int64_t d : kDims) {
    const fa::Problem p = problem(2 * 64 + 5, 30, d, true, 1, 2);
    const fa::AttentionData in = fa::make_inputs(p, 14);
    for (int k = 0; k < kRungs; ++k) {
      if (!fits_here(k, d)) continue;
      INFO(std::string(kLadder[k].name) << ", D = " << d);
      const auto r = fa::run_once(p, in, kLadder[k].forward);
      fa::testing::check_empty_rows(p, r.out);
      fa::testing::check_against_f64(p, in, r.out, fa::kFloat32Tol, kLadder[k].name);
    }
  }
}

TEST_CASE("a longer head: every rung on sampled float64 rows and against the rung below on every row") {
  for (const bool causal : {false, true}) {
    const fa::Problem p = problem(1531, 1531, 64, causal, 1, 2);
    const fa::AttentionData in = fa::make_inputs(p, 17);
    for (int k = 0; k < kRungs; ++k) {
      if (!fits_here(k, p.dim)) continue;
      INFO(std::string(kLadder[k].name) << (causal ? ", causal" : ""));
      const auto r = fa::run_once(p, in, kLadder[k].forward);
      fa::VerifyPlan plan;
      plan.max_full_flops = 0;  // 48 sampled rows (and the edges) against float64
      plan.previous = below(k, p.dim);
      const fa::Verification v = fa::verify_forward(p, in, r.out, plan, 17);
      for (const fa::CompareReport& c : v.reports) CHECK_MESSAGE(c.ok(), c.summary());
    }
  }
}

TEST_CASE("the same inputs give the same bits twice on every rung (no race between tile loads and reads)") {
  for (const bool causal : {false, true}) {
    const fa::Problem p = problem(517, 700, 128, causal, 2, 3);
    const fa::AttentionData in = fa::make_inputs(p, 16);
    for (int k = 0; k < kRungs; ++k) {
      if (!fits_here(k, p.dim)) continue;
      INFO(std::string(kLadder[k].name) << (causal ? ", causal" : ""));
      const auto a = fa::run_once(p, in, kLadder[k].forward);
      const auto b = fa::run_once(p, in, kLadder[k].forward);
      CHECK(std::memcmp(a.out.o.raw(), b.out.o.raw(), a.out.o.bytes()) == 0);
      CHECK(std::memcmp(a.out.lse.raw(), b.out.lse.raw(), a.out.lse.bytes()) == 0);
    }
  }
}

TEST_CASE("a head dim whose tiles do not fit this GPU's shared memory is a UsageError, not a failed launch") {
  // On an H100 (227 KiB per block) every rung fits every D and there is nothing to refuse: the
  // check is that fits_here says so. On a T4 it checks the refusals themselves.
  for (const std::int64_t d : kDims)
    for (int k = 0; k < kRungs; ++k) {
      INFO(std::string(kLadder[k].name) << ", D = " << d);
      if (fa::shared_memory_per_block_optin() >= 227 * 1024) CHECK(fits_here(k, d));
      if (fits_here(k, d)) continue;
      const fa::Problem p = problem(8, 8, d, false, 1, 1);
      CHECK_THROWS_AS(fa::run_once(p, fa::make_inputs(p, 15), kLadder[k].forward), fa::UsageError);
    }
}

TEST_CASE("an unsupported head dim is a UsageError on every rung, not a wrong answer") {
  for (const std::int64_t d : {16, 48, 96, 256}) {
    const fa::Problem p = problem(8, 8, d, false, 1, 1);
    const fa::AttentionData in = fa::make_inputs(p, 15);
    for (int k = 0; k < kRungs; ++k) {
      INFO(std::string(kLadder[k].name) << ", D = " << d);
      CHECK_THROWS_AS(fa::run_once(p, in, kLadder[k].forward), fa::UsageError);
    }
  }
}
