// ring_merge.hpp — stage 13's hole: folding one partial result into a running one, the step every
// GPU of the ring takes after each block of keys. Plain C++ that CUDA code can also call
// (FA_HOST_DEVICE): the CPU ring (ring_model.cpp) and the GPU kernels (ring_kernels.cuh) include it
// as <ring_merge.hpp>, and exercise ex13 puts the learner's copy (exercises/13_ring_attention/) first
// on the include path: its checks run it alone and inside the CPU ring, in float and double.
//
// Each ring step gives a GPU, for each of its query rows, an ordinary attention over one block of
// keys: the pair (O_b, LSE_b), O_b normalized by its own sum. The row keeps a running pair (O, LSE)
// over the blocks seen so far and folds each new one in:
//
//   LSE' = log(exp(LSE) + exp(LSE_b))                 (log_add_exp: the sums of the two add up)
//   O'   = exp(LSE − LSE') · O + exp(LSE_b − LSE') · O_b
//
// This is stage 02's online softmax once more (docs/02_cpu_online_softmax.md): there the running
// (m, l, Õ) absorbs a tile; here a finished block's (O_b, LSE_b), with LSE_b = m_b + log l_b. Stage
// 11 merges all of a row's parts at once (split_merge.hpp); the ring has them one at a time, on
// different GPUs, so it merges two at a time. The order does not matter: the result is the same up
// to rounding.
//
// A block that the causal mask hides entirely is never computed; a row that has seen no key yet
// holds (O = 0, LSE = −inf), which weighs nothing, and two −inf merge to −inf, never NaN.
#pragma once

#include <cmath>

#include "fa/host_device.hpp"

namespace fa::step13 {

// log(exp(a) + exp(b)) without overflow, for float or double; −inf when both are −inf.
template <class T>
FA_HOST_DEVICE inline T log_add_exp(T a, T b) {
  // >>> ex13:log_add_exp
  const T hi = a > b ? a : b, lo = a > b ? b : a;
  if (hi == -T(INFINITY)) return hi;  // both −inf: exp(lo − hi) would be exp(NaN)
  using std::exp, std::log1p;
  return hi + log1p(exp(lo - hi));  // exp(lo − hi) ∈ [0, 1]: nothing overflows
  // <<< ex13:log_add_exp
}

// Folds the partial result (o_b, lse_b) of one query row into the row's running (o, lse); d values.
template <class T, class U>
FA_HOST_DEVICE inline void merge_row(T* o, T& lse, const U* o_b, T lse_b, int d) {
  // >>> ex13:merge_row
  const T merged = log_add_exp(lse, lse_b);
  if (merged == -T(INFINITY)) return;  // neither has seen a key: O stays 0, LSE −inf
  using std::exp;
  const T w = exp(lse - merged), w_b = exp(lse_b - merged);  // the two shares of the row's sum
  for (int c = 0; c < d; ++c) o[c] = w * o[c] + w_b * static_cast<T>(o_b[c]);
  lse = merged;
  // <<< ex13:merge_row
}

}  // namespace fa::step13
