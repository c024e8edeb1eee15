// Exercise 11 — the starter of stage 11's hole split_merge.hpp: the split-KV merge, the rule that
// joins the partial results of split-KV decoding. The stage's kernels (decode_kernel.cuh) include
// it as <split_merge.hpp>; the exercise puts this folder first on the include path, and its checks
// run your two functions on the CPU.
//
// A split s of the keys returns, for one query row, the course's pair (O_s, LSE_s): its output
// normalized by its own sum, and LSE_s = log Σ_{j in s} exp(τ·s_ij). Fill in the two holes below,
// in order. Each sits between `// >>> ex11:TAG` and `// <<< ex11:TAG` and holds an FA_TODO that
// says what to write: replace the FA_TODO line with your code, keep the markers.
//
//   ex11:merged_lse  LSE = log Σ_s exp(LSE_s) over `parts` values lse[0], lse[stride], ...,
//                    computed without overflow: M = max_s LSE_s, LSE = M + log Σ_s exp(LSE_s − M).
//                    If every part is −inf (no part saw a key) return −inf, never NaN.
//   ex11:weight      the weight of part s in the merged O = Σ_s weight_s · O_s: its share of the
//                    row's whole sum, exp(LSE_s − LSE); 0 when the row saw no key (LSE = −inf).
//
// Check your work (runs the checks in the order of the holes):
//   ./course check ex11        (or: cmake --build build --target check_ex11)
//
// What you should see when it passes: `ok` lines for the two functions and for attention split
// into chunks and merged against float64 in one piece, then `3 of 3 checks pass.`
// Stuck? `./course hint ex11` shows a hint, one at a time (3 in all, each nearer the code).
// Common mistakes: summing exp(LSE_s) directly (overflows for LSE_s > 88); forgetting the stride
// (the parts of one row are `stride` floats apart); returning NaN for a row without keys;
// starting the running max at 0 instead of −inf (below about −87, exp(LSE_s − 0) underflows
// float, to 0 far enough down, and the log gives −inf: the checks try {−200, −201}).
// The chapter is docs/11_decoding.md; the answer is solutions/11_decoding/split_merge.hpp.
#pragma once

#include <cmath>

#include "fa/exercise.hpp"
#include "fa/host_device.hpp"

namespace fa::step11 {

// The merged LSE of `parts` partial LSEs lse[0], lse[stride], lse[2·stride], ...
FA_HOST_DEVICE inline float merged_lse(const float* lse, int parts, long long stride) {
  // >>> ex11:merged_lse
  FA_TODO("ex11:merged_lse", "M = max over the parts of lse[s * stride]; -INFINITY if M is -INFINITY; else M + log of the sum of exp(lse[s * stride] - M)");
  // <<< ex11:merged_lse
}

// The weight of a part with partial LSE lse_s in a row whose merged LSE is `lse`.
FA_HOST_DEVICE inline float part_weight(float lse_s, float lse) {
  // >>> ex11:weight
  FA_TODO("ex11:weight", "exp(lse_s - lse), or 0 when lse is -INFINITY");
  // <<< ex11:weight
}

}  // namespace fa::step11
