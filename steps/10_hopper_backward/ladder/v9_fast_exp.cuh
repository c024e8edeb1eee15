// v9_fast_exp.cuh — rung 9 of stage 10's ladder: P's exponentials by one MUFU.EX2 each
// (ex2.approx.ftz, fa::ptx::ex2) instead of exp2f.
//
// What changed from rung 8 (ladder/v8_wide_query_tiles.cuh), one idea: P = 2^(S·τlog2e − LSE·log2e)
// is computed by the special-function unit's instruction alone. exp2f compiles to the same
// MUFU.EX2 wrapped in the handling of results below 2^-126 (a compare, a multiply before and one
// after, both predicated): four instructions where one does. Stage 08's kernels and stage 09's
// forward already use ex2; stage 10 had kept exp2f. The kernel is rung 5's with its switch
// `fast_exp` on, in rung 8's tile shape.
//
// Why: read in the compiled loop (cuobjdump --dump-sass, sm_90a), rung 8's step has 64
// MUFU.EX2 per thread at D = 64 (Br = 128) and 32 at D = 128, each beside an FSETP and two FMULs;
// Nsight Compute counts about 1,060 (D = 64) and 920 (D = 128, rung 6) instructions per warp per
// step, and the schedulers issue in 41 % and 35 % of the cycles, the tensor pipe busy 49.5 % and
// 48.9 %: the warps wait on the chain from S to dV and dK, and the exponentials sit on it. Three
// instructions fewer per exponential are 192 of about 1,060 at D = 64, 96 of about 920 at D = 128.
// What changes in the results: P values below 2^-126 become 0 (flushed), far below what a 16-bit
// P or dS can hold next to the row's sum of 1; the relative error of ex2.approx is about 2^-22.
//
// Prediction, written before the first run: 1.03-1.08× rung 8 at D = 64, 1.02-1.06× at D = 128,
// causal like non-causal.
//
// Measured (one H200, bf16, the paper shapes at N = 4k and 16k, causal and not, one run beside rungs 6 and
// 8 to 11: docs/results/compare_10_rung10_h200.json): D = 64 1.005-1.027× rung 8, below the prediction; D = 128
// 1.021-1.030×, inside it. The instructions fell as counted: Nsight Compute on rung 10, which
// has these exponentials (N = 4k, docs/results/step10_rungs8-11_h200/), finds 921 M at D = 64 and
// 871 M at D = 128, 878 and 831 per warp per step against the 1,060 and 920 above (-17 % and
// -10 %, the -18 % and -10 % counted); the time fell far less: the exponentials' issue slots were
// not what the warps waited for.
#pragma once

#include "10_hopper_backward/ladder/v8_wide_query_tiles.cuh"

namespace fa::step10 {

// Rung 9's kernel: rung 5's with one MUFU.EX2 per exponential.
struct FastExpOptions : StmatrixOptions {
  static constexpr bool fast_exp = true;
};
template <class T, class C>
inline constexpr auto backward_fast_exp_kernel = backward_dq_tma_kernel<T, C, FastExpOptions>;

}  // namespace fa::step10
