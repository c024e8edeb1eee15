// verify.hpp — is a stage's output right, and how wrong may a right one be?
//
// The tolerance model (docs/tolerance.md). Rounding makes every implementation a little wrong,
// and how wrong depends on the inputs: scores of 200 carry 100x the rounding of scores of 2, long
// rows sum more terms, 16-bit types round 8000x coarser than float32. So the allowed error is not
// a constant; it is measured on the same inputs, as FlashAttention's own tests do:
//
//   ref    float64 attention on the checked rows (fa/reference.hpp)
//   plain  the plainest implementation in the stage's precision on the same rows: scores, max,
//          exp and sums in float32 one after the other, P rounded to the dtype before P·V, O
//          rounded to the dtype (reference.hpp: plain_row)
//   e      max |plain − ref| over the checked rows, for O and for LSE
//   pass   |got − ref| <= kPlainErrorMultiple · e + 4u·max|ref|  +  4u·|ref|    (u: unit roundoff)
//
// A correct kernel sums in a different order than `plain` and lands within a small multiple of
// its error; a wrong one (a missing rescale, an off-by-one mask) is off by O(1), millions of
// times more. Comparisons with the previous stage allow twice the bound: both are within it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fa/compare.hpp"
#include "fa/random.hpp"
#include "fa/tensor.hpp"

namespace fa {

inline constexpr double kPlainErrorMultiple = 4.0;

// A forward on host data, for references: writes O and LSE.
using ForwardFn = std::function<void(const Problem&, const AttentionData&, AttentionResult&)>;

struct PreviousStage {
  std::string name;         // "03 naive"
  ForwardFn forward;        // a bad_alloc ("does not fit here") or a UsageError ("does not run this
                            // problem") from it: the float64 rows stand alone
  double max_flops = 1e30;  // larger problems: the float64 rows alone
};

struct VerifyPlan {
  double max_full_flops = 2e9;  // float64 (and plain) on every row up to this many FLOPs; sampled rows beyond
  int sampled_rows = 48;        // plus the edge rows (fa::sample_rows)
  std::optional<PreviousStage> previous;  // forward stages: compared on every row
  double backward_safety = 8.0;           // backward stages: the float64 backward's bound (backward.hpp)
};

struct Verification {
  std::vector<CompareReport> reports;  // O, LSE (forward); and dQ, dK, dV (backward)
  std::string how;                     // "all rows", "48 sampled rows", ...
  std::string against;                 // "float64 (all rows), 03 naive (all rows)"
  double error_vs_plain = 0.0;         // max over O, LSE of max|got − ref| / max|plain − ref|
  bool ok() const;
  double max_abs() const;
  double max_rel() const;
  double rel_frobenius() const;  // the worst of the reports
  void print(std::ostream& os) const;
};

// The allowed error of an output against float64, from the plain implementation's error.
// `summed_keys` > 0: the output is a float32 sum over that many keys, whose rounding error grows
// like √n·u·|sum| (the roundings add as a random walk). The plain row's error estimates it, but one
// row can be far luckier than another implementation's summation order (a million keys, D = 1), so
// the bound does not go below 2·√n·u32·max|ref| (below 1.6e-5·max|ref| up to n = 16384).
Tolerance tolerance_from_plain(double plain_error, double max_abs_ref, DType output_dtype, std::int64_t summed_keys = 0);

// The forward check: float64 and plain on every row (small problems) or sampled rows, then the
// previous stage on every row where it runs.
Verification verify_forward(const Problem& p, const AttentionData& in, const AttentionResult& got,
                            const VerifyPlan& plan, std::uint64_t seed);

// For intermediates that no plain implementation is run for (S and P of stages 01 and 03, in
// tests): float32 rounds a score s to about u·|s|·√D, so scores of 50 to 200 (InputKind::
// large_logits) carry ~100x the error of scores of ~1, and exp turns it into the same relative
// error of every weight: the base tolerance widens 10x for them.
Tolerance tolerance_for(Tolerance base, InputKind inputs);

}  // namespace fa
