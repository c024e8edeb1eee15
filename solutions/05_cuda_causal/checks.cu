// Exercise 05 — the checks of causal tile skipping: against float64 at causal shapes (Nq = Nk,
// Nq < Nk with the diagonal moved by a multiple of 64 or not, Nq > Nk with Q tiles that see no
// key), against stage 04's bits (the mask on every tile), and the tiles loaded and masked against
// a pair-by-pair count. The same file builds against the starter and the solution. Needs a CUDA
// device (exit 77 without one).
//   cmake --build build --target check_ex05
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>

#include "04_cuda_flash_forward/flash_forward.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/testing.hpp"
#include "fa/random.hpp"
#include "flash_causal_exercise.cuh"

namespace {

using fa::testing::problem;
constexpr std::int64_t kTile = 64;  // Br = Bc

struct Counts {
  double loaded = 0, masked = 0;
};

// Tile (qt, kt) must be loaded iff some row of it sees some key of it; masked iff it also holds a
// pair that is not seen.
Counts count_pairwise(const fa::Problem& p) {
  Counts c;
  for (std::int64_t qt = 0; qt * kTile < p.seq_q; ++qt)
    for (std::int64_t kt = 0; kt * kTile < p.seq_k; ++kt) {
      bool seen = false, hidden = false;
      for (std::int64_t i = qt * kTile; i < std::min((qt + 1) * kTile, p.seq_q); ++i)
        for (std::int64_t j = kt * kTile; j < std::min((kt + 1) * kTile, p.seq_k); ++j)
          (p.visible(i, j) ? seen : hidden) = true;
      c.loaded += seen, c.masked += seen && hidden;
    }
  c.loaded *= static_cast<double>(p.heads_total());
  c.masked *= static_cast<double>(p.heads_total());
  return c;
}

struct Shape {
  std::int64_t nq, nk;
};
const Shape kShapes[] = {{1, 1}, {77, 77}, {200, 200}, {64, 192}, {100, 300}, {300, 100}, {133, 30}};

}  // namespace

TEST_CASE("ex05: causal forward matches float64, every D") {
  std::uint64_t seed = 50;
  for (const std::int64_t d : {32, 64, 128})
    for (const Shape& s : kShapes) {
      const fa::Problem p = problem(s.nq, s.nk, d, true, 2, 2);
      INFO(p.describe());
      const fa::AttentionData in = fa::make_inputs(p, ++seed);
      const auto r = fa::run_once(p, in, [](auto&&... a) { fa::ex05::attention_forward(a...); });
      fa::testing::check_against_f64(p, in, r.out, fa::kFloat32Tol, "ex05");
    }
}

TEST_CASE("ex05: the same bits as stage 04, which masks every tile") {
  std::uint64_t seed = 60;
  for (const Shape& s : kShapes) {
    const fa::Problem p = problem(s.nq, s.nk, 64, true, 2, 2);
    INFO(p.describe());
    const fa::AttentionData in = fa::make_inputs(p, ++seed);
    const auto ours = fa::run_once(p, in, [](auto&&... a) { fa::ex05::attention_forward(a...); });
    const auto stage04 = fa::run_once(p, in, fa::step04::attention_forward);
    CHECK(std::memcmp(ours.out.o.raw(), stage04.out.o.raw(), ours.out.o.bytes()) == 0);
    CHECK(std::memcmp(ours.out.lse.raw(), stage04.out.lse.raw(), ours.out.lse.bytes()) == 0);
  }
}

TEST_CASE("ex05: the tiles above the diagonal are never loaded; only the mixed ones are masked") {
  for (const Shape& s : kShapes) {
    const fa::Problem p = problem(s.nq, s.nk, 64, true, 2, 3);
    INFO(p.describe());
    fa::MemoryMeter meter;
    fa::DeviceBuffer<unsigned long long> counters(meter, 2);
    FA_CUDA_CHECK(cudaMemset(counters.data(), 0, counters.bytes()));
    fa::run_once(p, fa::make_inputs(p, 70), [&](auto&&... a) { fa::ex05::attention_forward(a..., counters.data()); });
    unsigned long long got[2];
    counters.download(got, 2);
    const Counts want = count_pairwise(p);
    CHECK(static_cast<double>(got[0]) == want.loaded);
    CHECK(static_cast<double>(got[1]) == want.masked);
  }
}
