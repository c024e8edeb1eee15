// Stage 02 — the online softmax: attention in tiles over K/V, on the CPU with Eigen.
//
// Stage 01 materialized S and P, [Nq, Nk] each. Here S only ever exists as one tile: Br query
// rows Q_i against Bc keys K_j. Each query row carries a running max m, a running sum l and an
// unnormalised output Õ, and each tile of keys is folded in:
//
//   S_i^(j) = τ · Q_i K_jᵀ                                       [Br, Bc]
//   m_i^(j) = max(m_i^(j−1), rowmax S_i^(j))                     m^(0) = −inf
//   P̃_i^(j) = exp(S_i^(j) − m_i^(j))                             [Br, Bc], entries ≤ 1
//   l_i^(j) = exp(m_i^(j−1) − m_i^(j)) · l_i^(j−1) + rowsum P̃_i^(j)       l^(0) = 0
//   Õ_i^(j) = diag(exp(m_i^(j−1) − m_i^(j))) · Õ_i^(j−1) + P̃_i^(j) V_j     Õ^(0) = 0
//
// and once, after the last tile: O_i = diag(l_i)⁻¹ Õ_i and LSE_i = m_i + log l_i.
// Why it is exact: after tile j, l and Õ are stage 01's sums Σ_k exp(S_k − m) and
// Σ_k exp(S_k − m)·v_k over the keys seen so far, taken with m = the max of those keys. When a
// tile raises the max, multiplying by exp(m_old − m_new) moves every term already summed onto the
// new max. After the last tile m is the row max, and O and LSE are stage 01's, up to rounding.
//
// The loops run in the order of FlashAttention's Algorithm 1 (Dao et al. 2022): the outer loop
// walks the K/V tiles, the inner loop the Q tiles. Each K_j, V_j is read once and meets every
// Q_i, so every row's m and l must be kept from one K/V tile to the next: 2·Nq floats per head.
// Memory: one Br x Bc score tile (its scores, then its P̃ in place) and m, l for the Nq rows of
// a head: (Br·Bc + 2·Nq)·4 bytes, 16 KiB + 8 bytes per query row. The memory chart shows it
// growing as N beside stage 01's N². (Stage 04 swaps the loops, as FlashAttention-2 does: a Q
// tile then stays on chip for all of K/V, and its m and l live in registers.)
// Õ accumulates in the output rows themselves.
// Causal: a (Q_i, K_j) pair of tiles that no row of Q_i sees is skipped (the tile's last row sees
// the most keys); within a tile, keys past a row's limit get P̃ = 0. A row that sees no key keeps
// m = −inf, l = 0, Õ = 0 and ends with O = 0, LSE = −inf.
//
// Build and run (the default sweep verifies against stage 01 and charts both):
//   cmake -S . -B build && cmake --build build --target step02_cpu_online_softmax
//   build/steps/02_cpu_online_softmax/step02_cpu_online_softmax      (--help for the flags)
//
// What changed from stage 01 (diff steps/01_cpu_attention/attention.cpp against this file):
// S and P [Nq, Nk] became one [Br, Bc] tile; the row max and row sum are built up tile by tile
// (kept for every row: m and l, [Nq] each), rescaling what was summed before; the division by l
// moved to the very end, once per row.
//
// Known limits, on purpose:
// - One CPU thread. Measured, it runs at about stage 01's speed (the small 64 x 64 x D products
//   cost Eigen a little, the tiles staying in cache gives it back); the point of this stage is
//   the memory, and speed is the subject of the GPU stages.
// - A causal tile on the diagonal still computes the scores it then masks (as the GPU stages do).
// - The tile buffers are full size even when N < 64.
#include "online_softmax.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace fa::step02 {

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
}  // namespace

void online_softmax_update(const Problem& p, std::int64_t i0, std::int64_t j0, MapRM S, float* m,
                           float* l, MapRM O_i) {
  const std::int64_t cols = S.cols();
  // >>> ex02:update
  for (std::int64_t r = 0; r < S.rows(); ++r) {
    // Row i0 + r sees keys below keys_visible(i0 + r): in this tile, the first `visible` columns.
    const std::int64_t visible = std::clamp<std::int64_t>(p.keys_visible(i0 + r) - j0, 0, cols);
    auto s = S.row(r);
    if (visible == 0) {  // no key of this tile: the row's m, l, Õ stay, and P̃ = 0 adds nothing
      s.setZero();
      continue;
    }
    const float m_new = std::max(m[r], s.head(visible).maxCoeff());
    // The terms summed so far carry exp(−m_old); this moves them onto exp(−m_new). It is ≤ 1, and
    // 0 on the row's first tile (m_old = −inf), where l and Õ are still 0.
    const float alpha = std::exp(m[r] - m_new);
    s.head(visible) = (s.head(visible).array() - m_new).exp();  // every exponent ≤ 0: no overflow
    s.tail(cols - visible).setZero();
    l[r] = alpha * l[r] + s.head(visible).sum();
    O_i.row(r) *= alpha;
    m[r] = m_new;
  }
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
    for (std::int64_t j0 = 0; j0 < Nk; j0 += kBc) {  // one tile K_j, V_j: keys j0 .. j0 + cols − 1
      const std::int64_t cols = std::min(kBc, Nk - j0);
      for (std::int64_t i0 = 0; i0 < Nq; i0 += kBr) {  // one tile Q_i: rows i0 .. i0 + rows − 1
        const std::int64_t rows = std::min(kBr, Nq - i0);
        // The tile's last row sees the most keys: if it sees none of K_j, no row of Q_i does.
        if (p.keys_visible(i0 + rows - 1) <= j0) continue;
        MapRM S(s_buf.data(), rows, cols);
        S.noalias() = scale * (Q.middleRows(i0, rows) * K.middleRows(j0, cols).transpose());
        MapRM O_i(O.data() + i0 * D, rows, D);
        online_softmax_update(p, i0, j0, S, m + i0, l + i0, O_i);
        O_i.noalias() += S * V.middleRows(j0, cols);  // S now holds P̃
      }
    }
    // <<< ex02:kv_loop

    // >>> ex02:finish
    for (std::int64_t i = 0; i < Nq; ++i) {
      if (p.keys_visible(i) == 0) {  // saw no key: Õ stayed 0, and LSE = −inf, not NaN
        lse[i] = -kInf;
        continue;
      }
      O.row(i) /= l[i];  // normalise once, at the end (FlashAttention-2), not after every tile
      lse[i] = m[i] + std::log(l[i]);
    }
    // <<< ex02:finish
  }
}

}  // namespace fa::step02
