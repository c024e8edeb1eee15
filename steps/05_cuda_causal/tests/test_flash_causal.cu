// Stage 05 against stage 04 with the mask on every tile (bitwise) and against float64; and the
// kernel's tile bounds (count_tiles applies them on the host) against a pair-by-pair count: the
// tiles above the diagonal are never loaded, the mixed ones are masked, no other.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "04_cuda_flash_forward/flash_forward.cuh"
#include "05_cuda_causal/flash_causal.cuh"
#include "05_cuda_causal/flash_causal_kernel.cuh"
#include "fa/compare.hpp"
#include "fa/random.hpp"
#include "fa/testing.hpp"

namespace {

using fa::testing::problem;
using fa::step05::kBc;
using fa::step05::kBr;

// The head dims this GPU runs (stage 05 launches stage 04's tiles): D = 128 (112 KiB of shared
// memory per block) is refused on a Turing T4 (64 KiB), where these checks leave it out.
std::vector<std::int64_t> dims_here() {
  std::vector<std::int64_t> dims;
  for (const std::int64_t d : {32, 64, 128})
    if (fa::step04::device_refusal(problem(64, 64, d, false), "05").empty()) dims.push_back(d);
  return dims;
}

fa::DeviceForward stage05(bool heavy_first) {
  return [=](const fa::Problem& p, const fa::AttentionInputs& in, const fa::AttentionOutputs& out, fa::DeviceContext& ctx) {
    fa::step05::attention_forward_ordered(p, in, out, ctx, heavy_first);
  };
}

// Bitwise, not within a tolerance: a skipped tile is one whose every score is masked, and for such
// a tile stage 04 computes alpha = exp2(m − m) = 1, P̃ = 0, Õ·1 + 0·V = Õ and l·1 + 0 = l exactly
// (or leaves m = −inf, l = 0, Õ = 0), so skipping it changes no bit; the tiles both stages do
// process they process with the same instructions in the same order. Any difference is a bug.
void check_same_bits(const fa::Problem& p, const fa::AttentionData& in, const fa::GpuRun& ours,
                     const fa::GpuRun& before) {
  const auto o = fa::compare("O vs stage 04", ours.out.o.to_float(), before.out.o.to_float(), fa::Tolerance{0, 0});
  const auto lse = fa::compare("LSE vs stage 04", ours.out.lse.values(), before.out.lse.values(), fa::Tolerance{0, 0});
  CHECK_MESSAGE(o.ok(), o.summary());
  CHECK_MESSAGE(lse.ok(), lse.summary());
  CHECK(std::memcmp(ours.out.o.raw(), before.out.o.raw(), ours.out.o.bytes()) == 0);
  CHECK(std::memcmp(ours.out.lse.raw(), before.out.lse.raw(), ours.out.lse.bytes()) == 0);
  (void)p, (void)in;
}

// Which K/V tiles have to be loaded and which masked, pair by pair: tile (qt, kt) is loaded iff
// some query row of it sees some key of it, and masked iff it also holds a pair that is not seen.
fa::step05::TileCounts count_pairwise(const fa::Problem& p) {
  fa::step05::TileCounts c;
  const std::int64_t q_tiles = (p.seq_q + kBr - 1) / kBr, k_tiles = (p.seq_k + kBc - 1) / kBc;
  for (std::int64_t qt = 0; qt < q_tiles; ++qt)
    for (std::int64_t kt = 0; kt < k_tiles; ++kt) {
      bool seen = false, hidden = false;
      for (std::int64_t i = qt * kBr; i < std::min((qt + 1) * kBr, p.seq_q); ++i)
        for (std::int64_t j = kt * kBc; j < std::min((kt + 1) * kBc, p.seq_k); ++j)
          (p.visible(i, j) ? seen : hidden) = true;
      c.loaded += seen ? 1 : 0;
      c.masked += seen && hidden ? 1 : 0;
      c.dense += 1;
    }
  c.loaded *= p.heads_total(), c.masked *= p.heads_total(), c.dense *= p.heads_total();
  return c;
}

struct Shape {
  std::int64_t nq, nk;
};
// N = 1; tails; one short of, exactly, one past a tile; Nq < Nk (the diagonal moves right, by a
// multiple of 64 or not) and Nq > Nk (the first rows see nothing, whole Q tiles load no tile).
const Shape kShapes[] = {{1, 1},    {1, 77},    {77, 1},    {77, 77},   {129, 129}, {129, 77},  {77, 129},
                         {200, 33},  {33, 200},  {63, 65},   {64, 64},   {65, 128},  {1000, 1000}, {300, 1000},
                         {1000, 300}, {64, 192}, {192, 64}, {130, 200}};

}  // namespace

TEST_CASE("stage 05 gives stage 04's bits (mask on every tile), causal and not, every D, both tile orders") {
  std::uint64_t seed = 5000;
  for (const std::int64_t d : dims_here())
    for (const Shape& s : kShapes)
      for (const bool causal : {true, false}) {
        const fa::Problem p = problem(s.nq, s.nk, d, causal, 2, 2);
        INFO(p.describe());
        const fa::AttentionData in = fa::make_inputs(p, ++seed);
        const auto before = fa::run_once(p, in, fa::step04::attention_forward);
        for (const bool heavy_first : {true, false}) {
          INFO("heavy_first " << heavy_first);
          const auto ours = fa::run_once(p, in, stage05(heavy_first));
          CHECK(ours.extra_bytes == 0);
          check_same_bits(p, in, ours, before);
        }
      }
}

TEST_CASE("large logits: still stage 04's bits, and float64 within the tolerance these inputs allow") {
  std::uint64_t seed = 5100;
  for (const std::int64_t d : dims_here())
    for (const Shape& s : {Shape{129, 300}, Shape{300, 129}, Shape{77, 77}}) {
      const fa::Problem p = problem(s.nq, s.nk, d, true, 1, 2);
      INFO(p.describe());
      const fa::AttentionData in = fa::make_inputs(p, ++seed, fa::InputKind::large_logits);
      const auto ours = fa::run_once(p, in, fa::step05::attention_forward);
      check_same_bits(p, in, ours, fa::run_once(p, in, fa::step04::attention_forward));
      fa::testing::check_verified(p, in, ours.out, "stage 05");
    }
}

TEST_CASE("stage 05 matches float64 at awkward causal shapes, every D") {
  std::uint64_t seed = 5200;
  for (const std::int64_t d : dims_here())
    for (const Shape& s : {Shape{1, 1}, Shape{77, 129}, Shape{129, 77}, Shape{33, 200}, Shape{200, 33}, Shape{300, 1000}}) {
      const fa::Problem p = problem(s.nq, s.nk, d, true, 2, 2);
      INFO(p.describe());
      const fa::AttentionData in = fa::make_inputs(p, ++seed);
      const auto ours = fa::run_once(p, in, fa::step05::attention_forward);
      fa::testing::check_against_f64(p, in, ours.out, fa::kFloat32Tol, "stage 05");
      fa::testing::check_verified(p, in, ours.out, "stage 05");
    }
}

TEST_CASE("rows that see no key (Nq > Nk) give O = 0 and LSE = -inf; whole Q tiles of them load nothing") {
  for (const std::int64_t d : dims_here()) {
    const fa::Problem p = problem(3 * kBr + 5, 30, d, true, 1, 2);  // Q tiles 0 and 1 see nothing
    const fa::AttentionData in = fa::make_inputs(p, 5300);
    const auto r = fa::run_once(p, in, fa::step05::attention_forward);
    fa::testing::check_empty_rows(p, r.out);
    fa::testing::check_against_f64(p, in, r.out, fa::kFloat32Tol, "stage 05");
    CHECK(fa::step05::count_tiles(p).loaded == count_pairwise(p).loaded);
    CHECK(fa::step05::count_tiles(p).loaded == 2 * 2);  // 2 heads x Q tiles 2 and 3, one key tile each
  }
}

TEST_CASE("the kernel's bounds: exactly the tiles that hold a visible pair are loaded, the mixed ones masked") {
  // count_tiles applies the bounds of flash_causal_kernel.cuh to every Q tile; the outputs above
  // (bitwise stage 04's, which loads every tile) show that no tile the bounds leave out was needed.
  for (const Shape& s : kShapes)
    for (const bool causal : {true, false}) {
      const fa::Problem p = problem(s.nq, s.nk, 64, causal, 2, 3);
      INFO(p.describe());
      const fa::step05::TileCounts want = count_pairwise(p), formula = fa::step05::count_tiles(p);
      CHECK(formula.loaded == want.loaded);
      CHECK(formula.masked == want.masked);
      CHECK(formula.dense == want.dense);
    }
  // Nq = Nk = 1000 causal: 16 Q tiles x 16 key tiles = 256 dense, 16·17/2 = 136 loaded, 16 masked.
  const fa::step05::TileCounts c = fa::step05::count_tiles(problem(1000, 1000, 64, true, 1, 1));
  CHECK(c.loaded == 136);
  CHECK(c.masked == 16);
  CHECK(c.dense == 256);
}

TEST_CASE("an unsupported head dim is a UsageError") {
  const fa::Problem p = problem(8, 8, 96, true, 1, 1);
  CHECK_THROWS_AS(fa::run_once(p, fa::make_inputs(p, 5500), fa::step05::attention_forward), fa::UsageError);
}
