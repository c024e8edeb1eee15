// Exercise 08 — what fragment_gradient_exercise.cu defines: a test launcher around stage 08's
// probabilities_and_score_gradient (your copy, in fa::ex08), which the checks compare with float64.
#pragma once

#include <vector>

namespace fa::ex08 {

// One run of the test kernel: `blocks` warps (one per block), each with its own 16 keys × 8·nq
// queries of raw scores Sᵀ and of dPᵀ, and the queries' LSE·log2e and D, fed to the function once,
// as stage 08's key-tile kernel does for one row block and one query tile.
struct GradientTile {
  int nq = 8;               // 8-query column tiles (NQ): 8 (query tiles of 64) or 4 (of 32)
  int blocks = 1;           // warps, one block each
  float scale_log2 = 0.0f;  // τ·log2(e)
  std::vector<float> st;    // [blocks][16 keys][8·nq queries]: raw Sᵀ = K Qᵀ, −inf where masked
  std::vector<float> dpt;   // [blocks][16][8·nq]: dPᵀ = V dOᵀ
  std::vector<float> lse2;  // [blocks][8·nq]: each query's LSE·log2(e) (+inf: it sees no key)
  std::vector<float> delta; // [blocks][8·nq]: each query's D = rowsum(dO ∘ O)
  int queries() const { return 8 * nq; }
};

struct GradientTileResult {
  std::vector<float> p;   // [blocks][16][8·nq]: Pᵀ, as the function left it in st
  std::vector<float> ds;  // [blocks][16][8·nq]: dSᵀ, as it left it in dpt
};

// Runs the test kernel on the current device and waits for it. Throws fa::TodoNotDone naming the
// first hole of probabilities_and_score_gradient that is still a TODO; std::invalid_argument on a
// malformed `in`.
GradientTileResult run_score_gradient(const GradientTile& in);

}  // namespace fa::ex08
