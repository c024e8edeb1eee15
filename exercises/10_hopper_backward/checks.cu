// Exercise 10 — dS stored transposed for dQ += dS·K. Fill in the three holes of ds_transpose.cuh
// (between `// >>> ex10:TAG` and `// <<< ex10:TAG`), in order; the chapter is
// docs/10_hopper_backward.md, the answer is in solutions/10_hopper_backward/.
//
//   ex10:which_element  the key and the query of the thread's element e of 8-query block j
//   ex10:store          its 16 bits out of the right dsa word, stored at its swizzled place
//   ex10:stmatrix_row   the query and first key of the row a lane addresses for stmatrix
//
// Check your work:   cmake --build build --target check_ex10
// Stage 10's real backward (steps/10_hopper_backward/), built against your ds_transpose.cuh, runs on
// the GPU after stage 10's forward twice, with its kernel (stmatrix stores) and with rung 3 (16-bit
// stores), and each run's dQ, dK and dV are checked against the float64 backward with the 16-bit
// rule (fa/backward.hpp), on fresh seeded inputs: D = 64 and 128, bf16 and fp16, tails of both
// tile sizes, causal with Nq ≠ Nk both ways. Your functions feed dQ only: dK and dV read dSᵀ from
// registers, so they are right from the start.
// Needs a GPU of compute capability 9.0 exactly (the stage is built for sm_90a, which runs there
// only): elsewhere the checks report "skipped" (exit 77). The same file builds against the solution
// (check_ex10_solution).
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include <ds_transpose.cuh>  // the hole: the starter's or the solution's, by the include path

#include "09_hopper/hopper.cuh"
#include "10_hopper_backward/hopper_backward.cuh"
#include "fa/backward.hpp"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/stage.hpp"
#include "fa/testing.hpp"

namespace {

// Stage 10's backward after stage 10's forward, on fresh inputs (B = 2, H = 2), with the stage's
// kernel (store_ds_transposed_x4) and with rung 3 (store_ds_transposed); dQ, dK, dV against the
// float64 backward on every row.
void run_and_check(std::int64_t nq, std::int64_t nk, std::int64_t d, bool causal, fa::DType dtype,
                   std::uint64_t seed) {
  fa::step09::exit_skipped_unless_hopper();  // stage 10's gate: compute capability 9.0, else exit 77
  fa::Problem p = fa::testing::problem(nq, nk, d, causal);
  p.dtype = dtype;
  const fa::AttentionData data = fa::make_case_inputs(p, fa::Pass::backward, seed, fa::InputKind::normal);
  const fa::GpuRun run = fa::run_once(p, data, fa::step10::attention_forward, fa::step10::attention_backward);
  // dQ, dK, dV (and O, LSE) on every row; all five reports printed when one fails.
  fa::testing::check_verification(fa::verify_backward(p, data, run.out, true, 0, 1),
                                  "the stage's kernel (store_ds_transposed_x4) " + p.describe() + " " +
                                      fa::to_string(dtype));
  const fa::DeviceBackward rung3 = [](const fa::Problem& pp, const fa::AttentionInputs& in, fa::ConstTensorView o,
                                      fa::ConstTensorView lse, fa::ConstTensorView d_o,
                                      const fa::AttentionGradients& g, fa::DeviceContext& ctx) {
    fa::step10::attention_backward_rung(fa::step10::Rung::dq_by_tma, pp, in, o, lse, d_o, g, ctx);
  };
  const fa::GpuRun plain = fa::run_once(p, data, fa::step10::attention_forward, rung3);
  fa::testing::check_verification(fa::verify_backward(p, data, plain.out, true, 0, 1),
                                  "rung 3 (store_ds_transposed) " + p.describe() + " " + fa::to_string(dtype));
}

}  // namespace

TEST_CASE("ex10 on the GPU: whole tiles, D = 64 and 128, bf16 and fp16") {
  run_and_check(128, 256, 64, false, fa::DType::bfloat16, 1001);
  run_and_check(64, 128, 128, false, fa::DType::float16, 1002);
}

TEST_CASE("ex10 on the GPU: tails (Nq not a multiple of 64, Nk not of 128), several query tiles") {
  run_and_check(130, 77, 64, false, fa::DType::float16, 1003);
  run_and_check(77, 300, 128, false, fa::DType::bfloat16, 1004);
}

TEST_CASE("ex10 on the GPU: causal, Nq > Nk (rows that see no key) and Nq < Nk") {
  run_and_check(200, 67, 64, true, fa::DType::bfloat16, 1005);
  run_and_check(67, 200, 128, true, fa::DType::float16, 1006);
  run_and_check(257, 129, 128, true, fa::DType::bfloat16, 1007);
}
