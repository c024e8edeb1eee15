// tiled_attention.hpp — stage 02's hole: the online-softmax update of one tile and the tiled loop
// of the forward (online_softmax.cpp says the math).
//
// Kept apart from online_softmax.cpp, which includes it as <tiled_attention.hpp>, because it is
// exercise ex02: the learner's copy (exercises/02_cpu_online_softmax/tiled_attention.hpp) has the
// three marked regions emptied, and the exercise builds stage 02's own online_softmax.cpp against
// it. It defines the functions that online_softmax.hpp declares, and only online_softmax.cpp
// includes it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "02_cpu_online_softmax/online_softmax.hpp"

namespace fa::step02 {

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
}  // namespace

void online_softmax_update(const Problem& p, std::int64_t i0, std::int64_t j0, MapRM S, float* m,
                           float* l, MapRM O_i) {
  const std::int64_t cols = S.cols();
  ++tiles_folded;  // counted for the checks (online_softmax.hpp says why)
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
