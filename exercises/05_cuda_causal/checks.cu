// Exercise 05 — the checks of the diagonal mask: stage 05's own kernel (flash_causal.cu, built on
// the starter's causal_tiles.cuh or the solution's) against float64 at causal shapes (Nq = Nk,
// Nq < Nk with the diagonal moved by a multiple of 64 or not, Nq > Nk with Q tiles that see no
// key), and against stage 04's bits (the mask on every tile). Needs a CUDA device (exit 77 without
// one).
//   cmake --build build --target check_ex05
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>

#include "04_cuda_flash_forward/flash_forward.cuh"
#include "05_cuda_causal/flash_causal.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/random.hpp"
#include "fa/testing.hpp"

namespace {

using fa::testing::problem;

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
      const auto r = fa::run_once(p, in, fa::step05::attention_forward);
      fa::testing::check_against_f64(p, in, r.out, fa::kFloat32Tol, "ex05");
    }
}

TEST_CASE("ex05: the same bits as stage 04, which masks every tile") {
  std::uint64_t seed = 60;
  for (const Shape& s : kShapes) {
    const fa::Problem p = problem(s.nq, s.nk, 64, true, 2, 2);
    INFO(p.describe());
    const fa::AttentionData in = fa::make_inputs(p, ++seed);
    const auto ours = fa::run_once(p, in, fa::step05::attention_forward);
    const auto stage04 = fa::run_once(p, in, fa::step04::attention_forward);
    CHECK(std::memcmp(ours.out.o.raw(), stage04.out.o.raw(), ours.out.o.bytes()) == 0);
    CHECK(std::memcmp(ours.out.lse.raw(), stage04.out.lse.raw(), ours.out.lse.bytes()) == 0);
  }
}

