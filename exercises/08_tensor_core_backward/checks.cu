// Exercise 08 — the softmax's gradient on accumulator registers, transposed. Fill in the two holes
// of fragment_gradient.cuh (between `// >>> ex08:TAG` and `// <<< ex08:TAG`), in order; the
// chapter is docs/08_tensor_core_backward.md, the answer is in solutions/08_tensor_core_backward/.
//
//   ex08:query_numbers  the LSE·log2e and D of the thread's two queries of column tile n
//   ex08:p_and_ds       Pᵀ = 2^(Sᵀ·τlog2e − LSE·log2e) and dSᵀ = Pᵀ ∘ (dPᵀ − D), in place
//
// Check your work:   cmake --build build --target check_ex08
// Stage 08's real backward (steps/08_tensor_core_backward/), built against your
// fragment_gradient.cuh, runs on the GPU after stage 07's forward, and its dQ, dK and dV are
// checked against the float64 backward with the 16-bit rule (fa/backward.hpp). Your function runs
// where a warp computes both Sᵀ and dPᵀ: D = 64 (32 keys a warp), 32 and 96 (16 keys a warp).
// Needs a CUDA device of compute capability 8.0 or newer: without one the checks report "skipped"
// (exit 77). The same file builds against the solution (check_ex08_solution).
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include <fragment_gradient.cuh>  // the hole: the starter's or the solution's, by the include path

#include "08_tensor_core_backward/tensor_core_backward.cuh"
#include "fa/backward.hpp"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/stage.hpp"
#include "fa/testing.hpp"

namespace {

// Stage 08's backward (atomic dQ) after stage 07's forward, on fresh inputs; dQ, dK, dV against
// the float64 backward on every row.
void run_and_check(std::int64_t nq, std::int64_t nk, std::int64_t d, bool causal, fa::DType dtype,
                   std::uint64_t seed) {
  fa::Problem p = fa::testing::problem(nq, nk, d, causal);
  p.dtype = dtype;
  const fa::AttentionData data = fa::make_case_inputs(p, fa::Pass::backward, seed, fa::InputKind::normal);
  const fa::DeviceBackward backward = [](const fa::Problem& pp, const fa::AttentionInputs& in, fa::ConstTensorView o,
                                         fa::ConstTensorView lse, fa::ConstTensorView d_o,
                                         const fa::AttentionGradients& g, fa::DeviceContext& ctx) {
    fa::step08::attention_backward(pp, in, o, lse, d_o, g, ctx);
  };
  const fa::GpuRun run = fa::run_once(p, data, fa::step08::attention_forward, backward);
  // dQ, dK, dV (and O, LSE) on every row; all five reports printed when one fails.
  fa::testing::check_verification(fa::verify_backward(p, data, run.out, true, 0, 1),
                                  p.describe() + " " + fa::to_string(dtype));
}

}  // namespace

TEST_CASE("ex08 on the GPU: D = 64, one and several query tiles, bf16 and fp16") {
  run_and_check(20, 50, 64, false, fa::DType::bfloat16, 81);
  run_and_check(130, 77, 64, false, fa::DType::float16, 82);
}

TEST_CASE("ex08 on the GPU: causal, Nq > Nk (queries that see no key: P = 0, via LSE·log2e = +inf)") {
  run_and_check(200, 77, 64, true, fa::DType::bfloat16, 83);
  run_and_check(77, 200, 64, true, fa::DType::float16, 84);
}

TEST_CASE("ex08 on the GPU: D = 32 and 96, warps of 16 keys") {
  run_and_check(100, 130, 32, true, fa::DType::bfloat16, 85);
  run_and_check(130, 100, 96, false, fa::DType::bfloat16, 86);
}
