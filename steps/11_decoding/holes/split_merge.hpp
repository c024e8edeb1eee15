// split_merge.hpp — stage 11's hole: the merge of partial attention results, the one rule that
// split-KV decoding adds to the course. Plain C++ that the CUDA kernels also call (FA_HOST_DEVICE):
// decode_kernel.cuh includes it as <split_merge.hpp>, and exercise ex11 puts the learner's copy
// (exercises/11_decoding/split_merge.hpp) first on the include path; its checks run it on the CPU.
//
// A split s of the keys is an ordinary attention over its chunk of keys: it returns, for each query
// row, the course's pair (O_s, LSE_s): O_s normalized by its own sum, LSE_s = log Σ_{j in s} exp(τ·s_ij).
// The chunks partition the keys, so the row's whole sum is the sum of the parts' sums:
//
//   LSE = log Σ_s exp(LSE_s)                 computed as  M + log Σ_s exp(LSE_s − M),  M = max_s LSE_s
//   O   = Σ_s exp(LSE_s − LSE) · O_s         each part weighted by its share of the whole sum
//
// This is stage 02's online softmax again (docs/02_cpu_online_softmax.md): there a running (m, l, Õ)
// absorbs one tile after another; here finished (O_s, LSE_s) pairs, with m_s + log l_s = LSE_s, are
// merged all at once. Stage 13 merges the same pairs across GPUs.
//
// A part that saw no key (every key masked, or an empty chunk) has LSE_s = −inf and weight 0. When
// every part is empty the row saw no key: LSE = −inf and O = 0, never NaN.
#pragma once

#include <cmath>

#include "fa/host_device.hpp"

namespace fa::step11 {

// The merged LSE of `parts` partial LSEs lse[0], lse[stride], lse[2·stride], ...
FA_HOST_DEVICE inline float merged_lse(const float* lse, int parts, long long stride) {
  // >>> ex11:merged_lse
  float m = -INFINITY;
  for (int s = 0; s < parts; ++s) m = fmaxf(m, lse[s * stride]);
  if (m == -INFINITY) return -INFINITY;  // no part saw a key (and exp(−inf − (−inf)) would be NaN)
  float sum = 0.0f;
  for (int s = 0; s < parts; ++s) sum += expf(lse[s * stride] - m);
  return m + logf(sum);  // sum >= 1: the part with LSE_s = m contributes exp(0)
  // <<< ex11:merged_lse
}

// The weight of a part with partial LSE lse_s in a row whose merged LSE is `lse`.
FA_HOST_DEVICE inline float part_weight(float lse_s, float lse) {
  // >>> ex11:weight
  return lse == -INFINITY ? 0.0f : expf(lse_s - lse);  // a part with lse_s = −inf weighs 0
  // <<< ex11:weight
}

}  // namespace fa::step11
