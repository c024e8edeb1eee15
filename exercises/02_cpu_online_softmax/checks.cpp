// Exercise 02 — the checks, in the order of the holes: the online update of one tile alone, then
// the whole tiled forward, with the number of tiles it folded (a causal tile hidden from every row
// changes no result, only the time, so the count is what shows it skipped). They run stage 02's own code (online_softmax.cpp), built against the
// starter's hole tiled_attention.hpp (exercises/02_cpu_online_softmax/) or the solution's
// (solutions/02_cpu_online_softmax/).
//   cmake --build build --target check_ex02
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "02_cpu_online_softmax/online_softmax.hpp"  // stage 02, built against the hole tiled_attention.hpp
#include "fa/compare.hpp"
#include "fa/random.hpp"
#include "fa/reference.hpp"
#include "fa/stage.hpp"

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

fa::Problem problem(std::int64_t nq, std::int64_t nk, std::int64_t d, bool causal, std::int64_t bh = 1) {
  fa::Problem p;
  p.heads = bh;
  p.seq_q = nq;
  p.seq_k = nk;
  p.dim = d;
  p.causal = causal;
  return p;
}

// Scores whose row max sits in a later tile for some rows and in the first tile for others, so
// that the rescaling exp(m_old − m_new) matters.
fa::MatrixRM scores(std::int64_t nq, std::int64_t nk, std::uint64_t seed) {
  fa::Rng rng(seed);
  fa::MatrixRM s(nq, nk);
  for (std::int64_t i = 0; i < nq; ++i)
    for (std::int64_t j = 0; j < nk; ++j)
      s(i, j) = static_cast<float>(rng.normal(0.0, 2.0) + (i % 2 ? 0.5 * static_cast<double>(j) : 0.0));
  return s;
}

// Checks online_softmax_update alone: the loop over key tiles is written out here, and after the
// last tile m, l and Õ must be the row max, Σ exp(S − m) and Σ exp(S − m)·v over the keys each
// row sees, computed in float64.
void check_update(const fa::Problem& p, std::int64_t tile, std::uint64_t seed) {
  INFO(p.describe() << ", tiles of " << tile << " keys");
  const std::int64_t nq = p.seq_q, nk = p.seq_k, d = p.dim;
  const fa::MatrixRM s = scores(nq, nk, seed);
  fa::MatrixRM v(nk, d);
  fa::Rng rng(seed + 1);
  for (std::int64_t k = 0; k < v.size(); ++k) v.data()[k] = static_cast<float>(rng.normal(0.5, 1.0));

  std::vector<float> m(static_cast<std::size_t>(nq), -kInf), l(static_cast<std::size_t>(nq), 0.0f);
  fa::MatrixRM o = fa::MatrixRM::Zero(nq, d);
  for (std::int64_t j0 = 0; j0 < nk; j0 += tile) {
    const std::int64_t cols = std::min(tile, nk - j0);
    fa::MatrixRM t = s.middleCols(j0, cols);
    fa::step02::online_softmax_update(p, 0, j0, fa::MapRM(t.data(), nq, cols), m.data(), l.data(),
                                    fa::MapRM(o.data(), nq, d));
    o += t * v.middleRows(j0, cols);
  }

  std::vector<double> m_ref(static_cast<std::size_t>(nq)), l_ref(m_ref.size());
  std::vector<double> o_ref(static_cast<std::size_t>(nq * d));
  for (std::int64_t i = 0; i < nq; ++i) {
    const std::int64_t visible = p.keys_visible(i);
    double mi = -INFINITY, li = 0;
    for (std::int64_t j = 0; j < visible; ++j) mi = std::fmax(mi, s(i, j));
    for (std::int64_t j = 0; j < visible; ++j) {
      const double e = std::exp(s(i, j) - mi);
      li += e;
      for (std::int64_t c = 0; c < d; ++c) o_ref[i * d + c] += e * v(j, c);
    }
    m_ref[i] = mi;
    l_ref[i] = li;
  }
  for (const auto& c : {fa::compare("m", m, m_ref, fa::kFloat32Tol, fa::index_in({nq})),
                        fa::compare("l", l, l_ref, fa::kFloat32Tol, fa::index_in({nq})),
                        fa::compare("O~", std::vector<float>(o.data(), o.data() + o.size()), o_ref, fa::kFloat32Tol,
                                    fa::index_in({nq, d}))})
    CHECK_MESSAGE(c.ok(), c.summary());
}

// The tiles the forward must fold: for each head, each query tile against each key tile that its
// last row sees (causal hides the others from every row of the tile).
std::int64_t tiles_needed(const fa::Problem& p) {
  using fa::step02::kBc;
  using fa::step02::kBr;
  std::int64_t tiles = 0;
  for (std::int64_t i0 = 0; i0 < p.seq_q; i0 += kBr) {
    const std::int64_t seen = p.keys_visible(std::min(i0 + kBr, p.seq_q) - 1);
    tiles += (seen + kBc - 1) / kBc;
  }
  return tiles * p.heads_total();
}

// The whole forward on NaN-poisoned outputs, against the float64 loop; and the tiles it folded.
void check_forward(const fa::Problem& p, const fa::AttentionData& in, fa::Tolerance tol) {
  INFO(p.describe());
  fa::AttentionResult out(p);
  fa::MemoryMeter meter;
  fa::step02::tiles_folded = 0;
  fa::step02::attention_forward(p, in.view(), out.view(), meter);
  const std::int64_t folded = fa::step02::tiles_folded, needed = tiles_needed(p);
  CHECK_MESSAGE(folded == needed, "tiles folded: " << folded << ", needed: " << needed
                                  << std::string(folded > needed ? " (a query tile whose last row sees none of K_j must be skipped)"
                                                                 : ""));
  const fa::ReferenceF64 ref = fa::reference_attention_f64(p, in);
  const auto o = fa::compare("O", out.o.values(), ref.o, tol, fa::index_in({p.batch, p.heads, p.seq_q, p.dim}));
  const auto lse = fa::compare("LSE", out.lse.values(), ref.lse, tol, fa::index_in({p.batch, p.heads, p.seq_q}));
  CHECK_MESSAGE(o.ok(), o.summary());
  CHECK_MESSAGE(lse.ok(), lse.summary());
}

}  // namespace

TEST_CASE("ex02:update — tiles folded one after another give the running max, sum and output") {
  check_update(problem(6, 10, 8, false), 4, 1);   // tiles of 4, 4 and 2 keys
  check_update(problem(6, 10, 8, false), 10, 2);  // one tile: the plain softmax sums
  // Causal, Nq > Nk: rows 0 and 1 see no key at all; the first rows see nothing of the later
  // tiles; the tiles cut through the mask.
  check_update(problem(12, 10, 8, true), 4, 3);
}

TEST_CASE("ex02:kv_loop and ex02:finish — the whole tiled forward against float64") {
  using fa::step02::kBc;
  using fa::step02::kBr;
  // N = 1; one key or row short of a tile, a tile, one past it; Nq != Nk both ways; every D.
  const std::int64_t shapes[][3] = {{1, 1, 16},          {kBr - 1, kBc, 32},     {kBr, kBc + 1, 16},
                                    {kBr + 1, 2 * kBc + 2, 64}, {2 * kBr + 2, kBc + 1, 32}, {150, 40, 128},
                                    {200, 200, 16}};  // causal: 10 of the 16 tiles
  std::uint64_t seed = 10;
  for (const auto& s : shapes)
    for (const bool causal : {false, true}) {
      const fa::Problem p = problem(s[0], s[1], s[2], causal, /*bh=*/2);
      check_forward(p, fa::make_inputs(p, ++seed), fa::kFloat32Tol);
    }
  const fa::Problem p = problem(70, 200, 64, true, 2);
  check_forward(p, fa::make_inputs(p, 20, fa::InputKind::large_logits),
                fa::tolerance_for(fa::kFloat32Tol, fa::InputKind::large_logits));
}

TEST_CASE("the workspace that the meter measures is one tile and m, l for every row of a head") {
  for (const std::int64_t n : {100, 1000}) {
    const std::int64_t bytes = (fa::step02::kBr * fa::step02::kBc + 2 * n) * 4;
    const fa::Problem p = problem(n, n, 16, true);
    const fa::AttentionData in = fa::make_inputs(p, 30);
    fa::AttentionResult out(p);
    fa::MemoryMeter meter;
    fa::step02::attention_forward(p, in.view(), out.view(), meter);
    CHECK_MESSAGE(meter.peak() == bytes, "N = " << n);
  }
}
