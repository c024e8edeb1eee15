// Exercise 02 — the starter of stage 02's hole tiled_attention.hpp: the online softmax, attention
// in tiles over K/V.
//
// Stage 02's online_softmax.cpp includes this file as <tiled_attention.hpp>; the exercise builds it
// with this folder first on the include path, so the stage runs your code. Fill in the three holes
// below, in order. Each hole sits between the markers `// >>> ex02:TAG`
// and `// <<< ex02:TAG` and holds an FA_TODO that says what to write: replace the FA_TODO line
// with your code and leave the markers where they are (the course check reads them).
// For one tile of scores S (rows i0.. of the query tile Q_i, keys j0.. of the key tile K_j):
//
//   ex02:update   row by row, over the keys of this tile that the row sees (P̃ = 0 for the others):
//                 m_new = max(m, rowmax S),  α = exp(m − m_new),  P̃ = exp(S − m_new) in place of S,
//                 l = α·l + rowsum P̃,  Õ = α·Õ,  m = m_new
//                 (a row that sees no key of this tile keeps m, l and Õ, and gets P̃ = 0)
//   ex02:kv_loop  the outer loop over key tiles j0 = 0, Bc, 2·Bc, ..., the inner loop over query
//                 tiles i0 = 0, Br, ...: S = τ · Q_i K_jᵀ into the score tile,
//                 online_softmax_update() with rows i0.. of m and l, then Õ_i += P̃ V_j. Skip a
//                 query tile whose last row sees none of K_j: causal hides the tile from every row.
//   ex02:finish   once per row, after the last tile: O = Õ / l and LSE = m + log l; a row that saw
//                 no key keeps Õ = 0 and gets LSE = −inf (never NaN)
//
// Check your work: this builds stage 02 with this file and checks.cpp, and runs the checks in the
// order of the holes; a failure names the TODO it stopped at, or the values that are wrong:
//   ./course check ex02        (or: cmake --build build --target check_ex02)
//
// Eigen, in one line each: Q.middleRows(i0, n) is rows i0 .. i0+n−1; S.row(r).head(n) the first n
// entries of row r (.tail(n) the last n); .maxCoeff() and .sum() reduce; .array() - x and .exp()
// work element by element; A.noalias() += B * C adds a product into A without a temporary.
// A tile of O to hand to online_softmax_update is a new map onto rows i0.. of O's storage,
// MapRM O_i(O.data() + i0 * D, rows, D), and the score tile is MapRM S(s_buf.data(), rows, cols):
// O.middleRows(i0, rows) is a block expression, not a MapRM, and does not convert to one.
// The chapter is docs/02_cpu_online_softmax.md; the answer is
// solutions/02_cpu_online_softmax/tiled_attention.hpp.
//
// What you should see when it passes: `ok    ex02:update — tiles folded one after another ...`,
// `ok    ex02:kv_loop and ex02:finish — the whole tiled forward against float64` (it also counts
// the tiles your loop folds: a causal query tile whose last row sees none of K_j must be skipped),
// the workspace check, then `3 of 3 checks pass.`
// Stuck? `./course hint ex02` shows a hint, one at a time (3 in all, each nearer the code).
// Common mistakes: forgetting to rescale l and Õ by exp(m_old − m_new) (wrong by a factor when a
// later tile raises the max); computing exp(−inf − (−inf)) = NaN for a row that has seen no key
// yet; dividing by l after every tile instead of once; skipping a Q tile by its first row instead
// of its last (the last row sees the most keys); no skip at all (the results are the same, the
// time is not: the check counts the tiles folded).
//
// Given: the workspace (one score tile, and m, l for every query row of a head, measured by the
// meter), the loop over the heads, and the start of each head: Õ = 0, m = −inf, l = 0.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "02_cpu_online_softmax/online_softmax.hpp"
#include "fa/exercise.hpp"

namespace fa::step02 {

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
}  // namespace

void online_softmax_update(const Problem& p, std::int64_t i0, std::int64_t j0, MapRM S, float* m,
                           float* l, MapRM O_i) {
  const std::int64_t cols = S.cols();
  ++tiles_folded;  // counted for the checks (online_softmax.hpp says why)
  // >>> ex02:update
  FA_TODO("ex02:update", "for each row r of the tile, over the keys of this tile it sees: "
          "m_new = max(m[r], row max), alpha = exp(m[r] - m_new), "
          "S row = exp(S - m_new) (0 for keys it does not see), "
          "l[r] = alpha * l[r] + row sum, O_i row *= alpha, m[r] = m_new");
  // <<< ex02:update
}

void attention_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                       MemoryMeter& workspace) {
  const std::int64_t Nq = p.seq_q, Nk = p.seq_k, D = p.dim;
  const float scale = p.softmax_scale();
  // The workspace: one score tile, and the running statistics m, l of every query row of a head.
  // The loop over K/V tiles is the outer one (FlashAttention, Algorithm 1), so every row's m and
  // l must survive from one K/V tile to the next: 2·Nq floats, the O(N) of this stage.
  HostBuffer<float> s_buf(workspace, static_cast<std::size_t>(kBr * kBc));
  HostBuffer<float> m_buf(workspace, static_cast<std::size_t>(Nq));
  HostBuffer<float> l_buf(workspace, static_cast<std::size_t>(Nq));
  float* const m = m_buf.data();
  float* const l = l_buf.data();
  for (std::int64_t bh = 0; bh < p.heads_total(); ++bh) {  // (b, h) flattened: heads are independent
    const ConstMapRM Q(in.q.as<float>() + bh * Nq * D, Nq, D);
    const ConstMapRM K(in.k.as<float>() + bh * Nk * D, Nk, D);
    const ConstMapRM V(in.v.as<float>() + bh * Nk * D, Nk, D);
    MapRM O(out.o.as<float>() + bh * Nq * D, Nq, D);  // Õ for the whole head, normalised in place at the end
    float* const lse = out.lse.as<float>() + bh * Nq;
    O.setZero();  // the outputs arrive poisoned with NaN, and 0 · NaN is NaN
    std::fill_n(m, Nq, -kInf);
    std::fill_n(l, Nq, 0.0f);

    // >>> ex02:kv_loop
    FA_TODO("ex02:kv_loop", "for each tile of Bc keys j0 (outer loop) and each tile of Br query rows i0 "
            "(inner loop) that sees any of those keys: S = scale * Q_i K_j^T into the tile s_buf "
            "([rows, cols]), online_softmax_update() with the rows' m + i0, l + i0, then O_i += S V_j");
    // <<< ex02:kv_loop

    // >>> ex02:finish
    FA_TODO("ex02:finish", "for each row i of the head: O row /= l[i] and lse[i] = m[i] + log(l[i]); "
            "a row that saw no key (p.keys_visible(i) == 0) gets lse[i] = -inf");
    // <<< ex02:finish
  }
}

}  // namespace fa::step02
