// Exercise 13 — the starter of stage 13's hole ring_merge.hpp: the ring's merge. After each block
// of keys, every GPU of the ring folds the block's partial result into a running one. The stage's
// CPU ring (ring_model.cpp) and GPU kernels (ring_kernels.cuh) include this file as
// <ring_merge.hpp>; the exercise puts this folder first on the include path, and its checks run
// your two functions alone and inside the stage's CPU ring.
//
// A block b of keys gives, for one query row, the course's pair (O_b, LSE_b): its output normalized
// by its own sum, and LSE_b = log Σ_{j in b} exp(τ·s_ij). The row keeps a running pair (O, LSE)
// over the blocks seen so far, (0, −inf) before the first. Fill in the two holes below, in order.
// Each sits between `// >>> ex13:TAG` and `// <<< ex13:TAG` and holds an FA_TODO that says what to
// write: replace the FA_TODO line with your code, keep the markers.
//
//   ex13:log_add_exp  log(exp(a) + exp(b)) for float or double, without overflow: with hi the
//                     larger and lo the smaller, hi + log1p(exp(lo − hi)). Both −inf: return −inf.
//   ex13:merge_row    fold (o_b, lse_b) into (o, lse): LSE' = log_add_exp(LSE, LSE_b),
//                     O' = exp(LSE − LSE')·O + exp(LSE_b − LSE')·O_b, then LSE = LSE'. When LSE'
//                     is −inf (neither has seen a key) leave O and LSE as they are.
//
// Check your work (runs the checks in the order of the holes):
//   ./course check ex13        (or: cmake --build build --target check_ex13)
//
// What you should see when it passes: `ok` lines for the two functions, for a ring of blocks
// visited out of order and merged one at a time against float64 in one piece, and for the stage's
// CPU ring on your merge, then `4 of 4 checks pass.`
// Stuck? `./course hint ex13` shows a hint, one at a time (3 in all, each nearer the code).
// Common mistakes: log(exp(a) + exp(b)) as written (overflows past 88 in float); forgetting to
// store the new LSE (the next block then gets the wrong weight); updating LSE before computing the
// old pair's weight; log(1 + x) for log1p(x) (1 + x rounds to 1 in float for x below 6e-8,
// so two LSEs 40 apart around 0 give 0 instead of 4e-18: the checks try it).
// The chapter is docs/13_ring_attention.md; the answer is solutions/13_ring_attention/ring_merge.hpp.
#pragma once

#include <cmath>

#include "fa/exercise.hpp"
#include "fa/host_device.hpp"

namespace fa::step13 {

// log(exp(a) + exp(b)) without overflow, for float or double; −inf when both are −inf.
template <class T>
FA_HOST_DEVICE inline T log_add_exp(T a, T b) {
  // >>> ex13:log_add_exp
  FA_TODO("ex13:log_add_exp", "hi = the larger of a and b, lo = the smaller; -inf if hi is -inf; else hi + log1p(exp(lo - hi))");
  // <<< ex13:log_add_exp
}

// Folds the partial result (o_b, lse_b) of one query row into the row's running (o, lse); d values.
template <class T, class U>
FA_HOST_DEVICE inline void merge_row(T* o, T& lse, const U* o_b, T lse_b, int d) {
  // >>> ex13:merge_row
  FA_TODO("ex13:merge_row", "merged = log_add_exp(lse, lse_b); if -inf return; o[c] = exp(lse - merged) * o[c] + exp(lse_b - merged) * o_b[c]; lse = merged");
  // <<< ex13:merge_row
}

}  // namespace fa::step13
