// Exercise 07 — the online softmax on accumulator registers. Fill in the two holes of
// fa/cuda/tc/fragment_softmax.cuh (between `// >>> ex07:TAG` and `// <<< ex07:TAG`), in order; the
// chapter is docs/07_tensor_cores.md, the answer is in solutions/07_tensor_cores/.
//
//   ex07:row_max      a row's max over the thread's scores, then across its group of 4 threads
//   ex07:exp_and_sum  alpha from the old max, P in place, l rescaled and added to
//
// Check your work:   cmake --build build --target check_ex07
// Stage 07's real kernel (steps/07_tensor_cores/flash_tc_kernel.cuh), built against your
// fragment_softmax.cuh, runs on the GPU and is checked against float64 with the rule of
// docs/tolerance.md: one K tile, many K tiles with the max moving, causal rows that see no key, and
// scores of 50 to 200. Needs a CUDA device of compute capability 8.0 or newer: without one the
// checks report "skipped" (exit 77). The same file builds against the solution (check_ex07_solution).
#include <doctest/doctest.h>

#include <cstdint>

#include <fa/cuda/tc/fragment_softmax.cuh>  // the hole: the starter's or the solution's, by the include path

#include "07_tensor_cores/tensor_cores.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/random.hpp"
#include "fa/testing.hpp"

namespace {

// Stage 07's forward on fresh inputs of p (dtype p.dtype), checked on every row against float64.
fa::AttentionResult run_and_check(const fa::Problem& p, std::uint64_t seed, fa::InputKind kind = fa::InputKind::normal) {
  const fa::AttentionData in = fa::make_inputs(p, seed, kind);
  const fa::GpuRun run = fa::run_once(p, in, fa::step07::attention_forward);
  fa::testing::check_verified(p, in, run.out, "stage 07 with your online_softmax");
  return run.out;
}

fa::Problem problem(std::int64_t nq, std::int64_t nk, std::int64_t d, bool causal, fa::DType dtype) {
  fa::Problem p = fa::testing::problem(nq, nk, d, causal);
  p.dtype = dtype;
  return p;
}

}  // namespace

TEST_CASE("ex07 on the GPU: one K tile per row (the first tile: m from -inf, alpha = 0)") {
  run_and_check(problem(77, 50, 64, false, fa::DType::bfloat16), 71);
}

TEST_CASE("ex07 on the GPU: many K tiles, the max moving (alpha rescales O and l), D = 64 and 128") {
  for (const fa::DType t : {fa::DType::bfloat16, fa::DType::float16}) {
    run_and_check(problem(130, 300, 64, false, t), 72);
    run_and_check(problem(77, 333, 128, false, t), 73);
  }
}

TEST_CASE("ex07 on the GPU: causal, Nq > Nk: rows that see no key give O = 0 and LSE = -inf") {
  const fa::Problem p = problem(200, 77, 64, true, fa::DType::bfloat16);
  const fa::AttentionResult out = run_and_check(p, 74);
  fa::testing::check_empty_rows(p, out);
}

TEST_CASE("ex07 on the GPU: scores of 50 to 200 (a max that is not taken overflows exp)") {
  run_and_check(problem(200, 200, 128, true, fa::DType::bfloat16), 75, fa::InputKind::large_logits);
}
