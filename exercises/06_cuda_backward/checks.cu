// Exercise 06 — the backward's two lines of calculus: dS = P ∘ (dP − delta) and the dK/dV
// accumulation. Fill in the two holes of backward_tile.cuh (between `// >>> ex06:TAG` and
// `// <<< ex06:TAG`), in order; the chapter is docs/06_cuda_backward.md, the answer is in
// solutions/06_cuda_backward/.
//
//   ex06:ds    grad_score(p, dp, delta): dS_ij = P_ij (dP_ij − D_i) for one element
//   ex06:dkdv  accumulate_dk_dv: for every m < TM and n < TN,
//                dv[m][n] += p[m] · d_o[n]      (dV = Pᵀ dO, one column r of the tile at a time)
//                dk[m][n] += ds[m] · q[n]       (dK = dSᵀ Q; the kernel folds the scale into dS)
//
// Check your work:   cmake --build build --target check_ex06
// The host checks run first (a hole throws there and names itself); then stage 06's real kernels,
// built against your backward_tile.cuh, run on the GPU against the float64 backward. Needs a CUDA
// device: without one the checks report "skipped" (exit 77). The same file builds against the
// solution (check_ex06_solution).
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include <backward_tile.cuh>  // the hole: the starter's or the solution's, by the include path

#include "06_cuda_backward/flash_backward.cuh"
#include "fa/backward.hpp"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/stage.hpp"
#include "fa/testing.hpp"

TEST_CASE("ex06:ds on the host: dS = P (dP - delta)") {
  using fa::step06::grad_score;
  CHECK(grad_score(0.5f, 3.0f, 1.0f) == doctest::Approx(1.0f));
  CHECK(grad_score(0.25f, -2.0f, 2.0f) == doctest::Approx(-1.0f));
  CHECK(grad_score(0.0f, 100.0f, -3.0f) == 0.0f);  // a masked element (P = 0) contributes nothing
  CHECK(grad_score(1.0f, 2.0f, 2.0f) == 0.0f);     // one key: P = 1 and dP = delta, so dS = 0
}

TEST_CASE("ex06:dkdv on the host: one column of the tile into dK and dV") {
  float dk[2][3] = {{1, 2, 3}, {4, 5, 6}}, dv[2][3] = {{0, 0, 0}, {1, 1, 1}};
  const float p[2] = {0.5f, 0.25f}, ds[2] = {-1.0f, 2.0f}, q[3] = {1, 2, 3}, d_o[3] = {4, -4, 8};
  fa::step06::accumulate_dk_dv<2, 3>(dk, dv, p, ds, q, d_o);
  for (int m = 0; m < 2; ++m)
    for (int n = 0; n < 3; ++n) {
      const float dk0 = m == 0 ? 1.0f + n : 4.0f + n, dv0 = m == 0 ? 0.0f : 1.0f;
      CHECK(dk[m][n] == doctest::Approx(dk0 + ds[m] * q[n]));
      CHECK(dv[m][n] == doctest::Approx(dv0 + p[m] * d_o[n]));
    }
}

TEST_CASE("ex06 on the GPU: stage 06's kernels with your helpers, against the float64 backward") {
  for (const bool causal : {false, true})
    for (const bool deterministic : {false, true}) {
      // Nq = 100: a tail, not a multiple of the 64-row tiles; B = H = 2.
      const fa::Problem p = fa::testing::problem(100, 130, 64, causal);
      const fa::AttentionData data = fa::make_case_inputs(p, fa::Pass::backward, 6, fa::InputKind::normal);
      const fa::DeviceBackward backward = [deterministic](const fa::Problem& pp, const fa::AttentionInputs& in,
                                                          fa::ConstTensorView o, fa::ConstTensorView lse,
                                                          fa::ConstTensorView d_o, const fa::AttentionGradients& g,
                                                          fa::DeviceContext& ctx) {
        fa::step06::BackwardOptions options;
        options.deterministic = deterministic;
        fa::step06::attention_backward(pp, in, o, lse, d_o, g, ctx, options);
      };
      const fa::GpuRun run = fa::run_once(p, data, fa::float64_forward(data), backward);
      // dQ, dK, dV (and O, LSE) on every row; all five reports printed when one fails.
      fa::testing::check_verification(fa::verify_backward(p, data, run.out, true, 0, 1),
                                      p.describe() + (deterministic ? " deterministic" : ""));
    }
}
