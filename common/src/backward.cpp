// The float64 backward that the backward stages are verified against, and the verification.
#include "fa/backward.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "fa/parallel.hpp"
#include "fa/random.hpp"
#include "fa/reference.hpp"

namespace fa {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

// ---------------------------------------------------------------------------------------------
// The float64 reference

MatrixD head_f64(const HostTensor& t, std::int64_t b, std::int64_t h) { return t.head(b, h).cast<double>(); }

void head_forward_f64(const Problem& p, const MatrixD& q, const MatrixD& k, const MatrixD& v, MatrixD& o,
                      VectorD& lse) {
  const std::int64_t nq = q.rows(), nk = k.rows();
  MatrixD s = (q * k.transpose()) * static_cast<double>(p.softmax_scale());
  o.setZero(nq, q.cols());
  lse.resize(nq);
  for (std::int64_t i = 0; i < nq; ++i) {
    const std::int64_t seen = std::min(p.keys_visible(i), nk);
    if (seen == 0) {
      lse[i] = -kInf;
      continue;
    }
    const double m = s.row(i).head(seen).maxCoeff();
    const double l = (s.row(i).head(seen).array() - m).exp().sum();
    lse[i] = m + std::log(l);
    for (std::int64_t j = 0; j < seen; ++j) o.row(i) += std::exp(s(i, j) - lse[i]) * v.row(j);
  }
}

std::vector<std::int64_t> all_indices(std::int64_t n) {
  std::vector<std::int64_t> r(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) r[static_cast<std::size_t>(i)] = i;
  return r;
}

HeadGradientsF64 head_backward_f64(const Problem& p, const MatrixD& q, const MatrixD& k, const MatrixD& v,
                                   const MatrixD& d_o, const std::vector<std::int64_t>& q_rows,
                                   const std::vector<std::int64_t>& k_rows) {
  const std::int64_t nq = q.rows(), nk = k.rows(), D = q.cols();
  const double scale = p.softmax_scale();
  HeadGradientsF64 g;
  // Pass 1, every query row in blocks: LSE_i, D_i = rowsum(dO ∘ O)_i and Σ_d |dO_id O_id|.
  // The blocks are independent (each writes its own rows): one range of them per core, the same
  // numbers as one loop.
  VectorD lse(nq), delta(nq), delta_abs(nq);
  const std::int64_t block = 256;
  g.max_abs_score = parallel_max((nq + block - 1) / block, [&](std::int64_t first_block, std::int64_t end_block) {
    double max_abs_score = 0;
    for (std::int64_t i0 = first_block * block; i0 < std::min(nq, end_block * block); i0 += block) {
      const std::int64_t rows = std::min(block, nq - i0);
      MatrixD s = (q.middleRows(i0, rows) * k.transpose()) * scale;
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t seen = std::min(p.keys_visible(i0 + r), nk);
        if (seen == 0) {
          lse[i0 + r] = -kInf;
          s.row(r).setZero();
          continue;
        }
        max_abs_score = std::max(max_abs_score, s.row(r).head(seen).cwiseAbs().maxCoeff());
        const double m = s.row(r).head(seen).maxCoeff();
        lse[i0 + r] = m + std::log((s.row(r).head(seen).array() - m).exp().sum());
        s.row(r).head(seen) = (s.row(r).head(seen).array() - lse[i0 + r]).exp().matrix();
        s.row(r).tail(nk - seen).setZero();
      }
      const MatrixD o = s * v;  // P V
      delta.segment(i0, rows) = (o.array() * d_o.middleRows(i0, rows).array()).rowwise().sum().matrix();
      delta_abs.segment(i0, rows) = (o.array() * d_o.middleRows(i0, rows).array()).abs().rowwise().sum().matrix();
    }
    return max_abs_score;
  }, /*serial_below=*/2);
  auto prob = [&](std::int64_t i, std::int64_t j, double s_ij) {
    return p.visible(i, j) && lse[i] > -kInf ? std::exp(s_ij - lse[i]) : 0.0;
  };
  const MatrixD abs_q = q.cwiseAbs(), abs_k = k.cwiseAbs(), abs_v = v.cwiseAbs(), abs_do = d_o.cwiseAbs();

  g.q_rows = q_rows;
  g.k_rows = k_rows;
  g.o.setZero(static_cast<std::int64_t>(q_rows.size()), D);
  g.dq.setZero(static_cast<std::int64_t>(q_rows.size()), D);
  g.lse.resize(static_cast<std::int64_t>(q_rows.size()));
  // Query rows: o_i = Σ_j P_ij v_j, dq_i = scale Σ_j P_ij (dP_ij − D_i) k_j.
  for (std::size_t n = 0; n < q_rows.size(); ++n) {
    const std::int64_t i = q_rows[n];
    const VectorD s = (k * q.row(i).transpose()) * scale;
    const VectorD dp = v * d_o.row(i).transpose();
    const VectorD dp_abs = abs_v * abs_do.row(i).transpose();
    VectorD pr(nk), ds(nk), pa(nk);
    for (std::int64_t j = 0; j < nk; ++j) {
      pr[j] = prob(i, j, s[j]);
      ds[j] = pr[j] * (dp[j] - delta[i]);
      pa[j] = pr[j] * (dp_abs[j] + delta_abs[i]);
    }
    const auto row = static_cast<std::int64_t>(n);
    g.o.row(row) = (v.transpose() * pr).transpose();
    g.dq.row(row) = (k.transpose() * ds).transpose() * scale;
    g.lse[row] = lse[i];
    g.bound_o = std::max(g.bound_o, (abs_v.transpose() * pr).maxCoeff());
    g.bound_dq = std::max(g.bound_dq, scale * (abs_k.transpose() * pa).maxCoeff());
  }
  // Key rows: dv_j = Σ_i P_ij dO_i, dk_j = scale Σ_i dS_ij q_i.
  g.dk.setZero(static_cast<std::int64_t>(k_rows.size()), D);
  g.dv.setZero(static_cast<std::int64_t>(k_rows.size()), D);
  for (std::size_t n = 0; n < k_rows.size(); ++n) {
    const std::int64_t j = k_rows[n];
    const VectorD s = (q * k.row(j).transpose()) * scale;
    const VectorD dp = d_o * v.row(j).transpose();
    const VectorD dp_abs = abs_do * abs_v.row(j).transpose();
    VectorD pr(nq), ds(nq), pa(nq);
    for (std::int64_t i = 0; i < nq; ++i) {
      pr[i] = prob(i, j, s[i]);
      ds[i] = pr[i] * (dp[i] - delta[i]);
      pa[i] = pr[i] * (dp_abs[i] + delta_abs[i]);
    }
    const auto row = static_cast<std::int64_t>(n);
    g.dv.row(row) = (d_o.transpose() * pr).transpose();
    g.dk.row(row) = (q.transpose() * ds).transpose() * scale;
    g.bound_dv = std::max(g.bound_dv, (abs_do.transpose() * pr).maxCoeff());
    g.bound_dk = std::max(g.bound_dk, scale * (abs_q.transpose() * pa).maxCoeff());
  }
  return g;
}

HeadGradientsPlain head_backward_plain(const Problem& p, const MatrixF& q, const MatrixF& k, const MatrixF& v,
                                       const MatrixF& d_o, const std::vector<std::int64_t>& q_rows,
                                       const std::vector<std::int64_t>& k_rows) {
  const std::int64_t nq = q.rows(), nk = k.rows(), D = q.cols();
  const float scale = p.softmax_scale(), inf = std::numeric_limits<float>::infinity();
  auto round = [&](float x) { return round_to(p.dtype, x); };
  // Pass 1, every query row in blocks: the plain forward (LSE, O) and D_i = rowsum(dO ∘ O).
  Eigen::VectorXf lse(nq), delta(nq);
  MatrixF o_all(nq, D);
  const std::int64_t block = 256;
  parallel_ranges((nq + block - 1) / block, [&](std::int64_t first_block, std::int64_t end_block) {
    for (std::int64_t i0 = first_block * block; i0 < std::min(nq, end_block * block); i0 += block) {
      const std::int64_t rows = std::min(block, nq - i0);
      MatrixF s = (q.middleRows(i0, rows) * k.transpose()) * scale;
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t i = i0 + r, seen = std::min(p.keys_visible(i), nk);
        o_all.row(i).setZero();
        if (seen == 0) {
          lse[i] = -inf;
          delta[i] = 0.0f;
          continue;
        }
        const float m = s.row(r).head(seen).maxCoeff();
        float l = 0.0f;
        for (std::int64_t j = 0; j < seen; ++j) {
          const float e = std::exp(s(r, j) - m);
          l += e;
          o_all.row(i) += round(e) * v.row(j);
        }
        for (std::int64_t d = 0; d < D; ++d) o_all(i, d) = round(o_all(i, d) / l);
        lse[i] = m + std::log(l);
        delta[i] = o_all.row(i).dot(d_o.row(i));
      }
    }
  }, /*align=*/1, /*serial_below=*/2);  // the blocks on every core, as in head_backward_f64
  auto prob = [&](std::int64_t i, std::int64_t j, float s_ij) {
    return p.visible(i, j) && lse[i] > -inf ? std::exp(s_ij - lse[i]) : 0.0f;
  };
  HeadGradientsPlain g;
  const auto nqr = static_cast<std::int64_t>(q_rows.size()), nkr = static_cast<std::int64_t>(k_rows.size());
  g.o.resize(nqr, D);
  g.dq.resize(nqr, D);
  g.lse.resize(nqr);
  for (std::int64_t n = 0; n < nqr; ++n) {
    const std::int64_t i = q_rows[static_cast<std::size_t>(n)];
    const Eigen::VectorXf s = (k * q.row(i).transpose()) * scale;
    const Eigen::VectorXf dp = v * d_o.row(i).transpose();
    Eigen::VectorXf ds(nk);
    for (std::int64_t j = 0; j < nk; ++j) ds[j] = round(prob(i, j, s[j]) * (dp[j] - delta[i]));
    g.dq.row(n) = ((k.transpose() * ds) * scale).transpose().unaryExpr(round);
    g.o.row(n) = o_all.row(i);
    g.lse[n] = lse[i];
  }
  g.dk.resize(nkr, D);
  g.dv.resize(nkr, D);
  for (std::int64_t n = 0; n < nkr; ++n) {
    const std::int64_t j = k_rows[static_cast<std::size_t>(n)];
    const Eigen::VectorXf s = (q * k.row(j).transpose()) * scale;
    const Eigen::VectorXf dp = d_o * v.row(j).transpose();
    Eigen::VectorXf pr(nq), ds(nq);
    for (std::int64_t i = 0; i < nq; ++i) {
      const float pij = prob(i, j, s[i]);
      pr[i] = round(pij);
      ds[i] = round(pij * (dp[i] - delta[i]));
    }
    g.dv.row(n) = (d_o.transpose() * pr).transpose().unaryExpr(round);
    g.dk.row(n) = ((q.transpose() * ds) * scale).transpose().unaryExpr(round);
  }
  return g;
}

// ---------------------------------------------------------------------------------------------
// Verification

double backward_relative_tolerance(const Problem& p, double max_abs_score, double safety) {
  const double u = std::ldexp(1.0, -24);  // float32 unit roundoff
  const double n = static_cast<double>(std::max(p.seq_q, p.seq_k) + p.dim);
  return safety * u * (std::sqrt(n) + max_abs_score);
}

Tolerance gradient_tolerance(std::span<const double> ref, double rel) {
  double max_abs = 0.0;
  for (double r : ref)
    if (std::isfinite(r)) max_abs = std::max(max_abs, std::fabs(r));
  return {rel * max_abs, rel};
}

namespace {

// Rows worth checking in one head of length n: both ends, the causal edge, and `count` random ones.
std::vector<std::int64_t> pick_rows(std::int64_t n, std::int64_t edge, int count, Rng& rng) {
  std::set<std::int64_t> picked{0, n - 1, std::clamp<std::int64_t>(edge, 0, n - 1)};
  for (int c = 0; c < count; ++c) picked.insert(static_cast<std::int64_t>(rng.uniform() * static_cast<double>(n)));
  return {picked.begin(), picked.end()};
}

void append_rows(std::vector<float>& dst, const HostTensor& t, std::int64_t b, std::int64_t h,
                 const std::vector<std::int64_t>& rows) {
  const std::int64_t D = t.shape().d;
  for (std::int64_t r : rows) {
    const std::int64_t from = t.head_offset(b, h) + r * D;
    for (std::int64_t d = 0; d < D; ++d) dst.push_back(t.get(from + d));
  }
}
// The largest |plain − ref| (and |ref|) of a tensor over the checked rows; non-finite pairs (−inf
// LSE of a row that sees no key, on both sides) are exact.
struct Errors {
  double max_diff = 0, max_ref = 0;
  template <class A, class B>
  void add(const A& got, const B& ref) {
    for (std::int64_t i = 0; i < ref.size(); ++i) {
      const double g = got.data()[i], r = ref.data()[i];
      if (!std::isfinite(g) || !std::isfinite(r)) continue;
      max_diff = std::fmax(max_diff, std::fabs(g - r));
      max_ref = std::fmax(max_ref, std::fabs(r));
    }
  }
};

double max_abs_diff(const std::vector<float>& got, const std::vector<double>& ref) {
  double m = 0;
  for (std::size_t i = 0; i < ref.size(); ++i)
    if (std::isfinite(got[i]) && std::isfinite(ref[i])) m = std::fmax(m, std::fabs(got[i] - ref[i]));
  return m;
}

void append_matrix(std::vector<double>& dst, const MatrixD& m) {
  for (std::int64_t r = 0; r < m.rows(); ++r)
    for (std::int64_t c = 0; c < m.cols(); ++c) dst.push_back(m(r, c));
}

}  // namespace

Verification verify_backward(const Problem& p, const AttentionData& data_any, const AttentionResult& got, bool full,
                             int sampled_rows, std::uint64_t seed, double safety) {
  const AttentionData data = as_float32(data_any);
  // Grouped-query heads: K/V head hk serves query heads hk·G .. hk·G + G − 1, and its dK, dV are
  // the sums of their gradients over the group (G = 1: one query head per K/V head).
  const std::int64_t group = p.heads / p.kv_heads();
  std::vector<std::pair<std::int64_t, std::int64_t>> kv_heads;
  if (full) {
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t hk = 0; hk < p.kv_heads(); ++hk) kv_heads.emplace_back(b, hk);
  } else {
    kv_heads.emplace_back(0, 0);
    if (p.batch * p.kv_heads() > 1) kv_heads.emplace_back(p.batch - 1, p.kv_heads() - 1);
  }
  Rng rng(seed ^ 0xBAC4A2Dull);
  std::vector<float> g_o, g_lse, g_dq, g_dk, g_dv;
  std::vector<double> r_o, r_lse, r_dq, r_dk, r_dv;
  // 16-bit stages: the plain implementation's error on the same rows, per tensor (max |plain − ref|).
  const bool plain_rule = p.dtype != DType::float32;
  Errors e_o, e_lse, e_dq, e_dk, e_dv;
  std::size_t q_count = 0, k_count = 0;
  double bound_o = 0, bound_dq = 0, bound_dk = 0, bound_dv = 0, max_abs_score = 0;
  for (const auto& [b, hk] : kv_heads) {
    // The causal rows that see the fewest keys, and the keys that the fewest queries see.
    const std::int64_t first_seeing_row = -p.causal_offset();
    const std::int64_t last_key_seen = p.seq_k - 1;
    const auto q_rows = full ? all_indices(p.seq_q) : pick_rows(p.seq_q, first_seeing_row, sampled_rows, rng);
    const auto k_rows = full ? all_indices(p.seq_k) : pick_rows(p.seq_k, last_key_seen, sampled_rows, rng);
    q_count = q_rows.size(), k_count = k_rows.size();
    const MatrixD k = head_f64(data.k, b, hk), v = head_f64(data.v, b, hk);
    const auto nk_rows = static_cast<Eigen::Index>(k_rows.size());
    MatrixD dk = MatrixD::Zero(nk_rows, p.dim), dv = MatrixD::Zero(nk_rows, p.dim);
    MatrixF plain_dk = MatrixF::Zero(nk_rows, p.dim), plain_dv = MatrixF::Zero(nk_rows, p.dim);
    double group_bound_dk = 0, group_bound_dv = 0;  // the sums' terms add up over the group
    for (std::int64_t h = hk * group; h < (hk + 1) * group; ++h) {
      const MatrixD q = head_f64(data.q, b, h), d_o = head_f64(data.d_o, b, h);
      const HeadGradientsF64 ref = head_backward_f64(p, q, k, v, d_o, q_rows, k_rows);
      if (plain_rule) {
        const HeadGradientsPlain plain = head_backward_plain(p, q.cast<float>(), k.cast<float>(), v.cast<float>(),
                                                             d_o.cast<float>(), q_rows, k_rows);
        e_o.add(plain.o, ref.o);
        e_dq.add(plain.dq, ref.dq);
        e_lse.add(plain.lse, ref.lse);
        plain_dk += plain.dk;
        plain_dv += plain.dv;
      }
      append_rows(g_o, got.o, b, h, q_rows);
      append_rows(g_dq, got.dq, b, h, q_rows);
      for (std::int64_t r : q_rows) g_lse.push_back(got.lse.get((b * p.heads + h) * p.seq_q + r));
      append_matrix(r_o, ref.o);
      append_matrix(r_dq, ref.dq);
      for (std::int64_t n = 0; n < ref.lse.size(); ++n) r_lse.push_back(ref.lse[n]);
      dk += ref.dk;
      dv += ref.dv;
      bound_o = std::max(bound_o, ref.bound_o);
      bound_dq = std::max(bound_dq, ref.bound_dq);
      group_bound_dk += ref.bound_dk;
      group_bound_dv += ref.bound_dv;
      max_abs_score = std::max(max_abs_score, ref.max_abs_score);
    }
    if (plain_rule) {
      e_dk.add(plain_dk, dk);
      e_dv.add(plain_dv, dv);
    }
    append_rows(g_dk, got.dk, b, hk, k_rows);
    append_rows(g_dv, got.dv, b, hk, k_rows);
    append_matrix(r_dk, dk);
    append_matrix(r_dv, dv);
    bound_dk = std::max(bound_dk, group_bound_dk);
    bound_dv = std::max(bound_dv, group_bound_dv);
  }
  Verification v;
  const double rel = backward_relative_tolerance(p, max_abs_score, safety);
  if (plain_rule) {
    // The plain rule, plus the float32 bound of the sums (rel·bound): where a gradient cancels to
    // exactly 0 (one key: dS = P·(dP − D) = 0), plain and kernel both leave float32 rounding of
    // terms that do not vanish, in different orders, and 4·e + 4u·max|ref| would be 0.
    auto report = [&](const char* name, const std::vector<float>& got_values, const std::vector<double>& ref_values,
                      const Errors& e, DType type, double bound) {
      v.error_vs_plain = std::fmax(v.error_vs_plain, e.max_diff > 0 ? max_abs_diff(got_values, ref_values) / e.max_diff : 0);
      Tolerance tol = tolerance_from_plain(e.max_diff, e.max_ref, type);
      tol.atol += rel * bound;
      return compare(name, got_values, ref_values, tol);
    };
    v.reports = {report("dQ", g_dq, r_dq, e_dq, p.dtype, bound_dq), report("dK", g_dk, r_dk, e_dk, p.dtype, bound_dk),
                 report("dV", g_dv, r_dv, e_dv, p.dtype, bound_dv), report("O", g_o, r_o, e_o, p.dtype, bound_o),
                 report("LSE", g_lse, r_lse, e_lse, DType::float32, 0.0)};
  } else {
    v.reports = {compare("dQ", g_dq, r_dq, Tolerance{rel * bound_dq, rel}),
                 compare("dK", g_dk, r_dk, Tolerance{rel * bound_dk, rel}),
                 compare("dV", g_dv, r_dv, Tolerance{rel * bound_dv, rel}),
                 compare("O", g_o, r_o, Tolerance{rel * bound_o, rel}), compare("LSE", g_lse, r_lse, kFloat32Tol)};
  }
  const std::size_t q_heads = kv_heads.size() * static_cast<std::size_t>(group);
  v.how = full ? "all rows" : std::to_string(q_heads) + " heads, " + std::to_string(q_count) + " query rows and " +
                                  std::to_string(k_count) + " key rows each";
  v.against = "float64 backward (" + v.how + ")";
  return v;
}

Verification compare_backward(const AttentionResult& got, const AttentionResult& ref, double grad_rel_tol) {
  auto widen = [](const HostTensor& t) {
    const std::vector<float> f = t.to_float();
    return std::vector<double>(f.begin(), f.end());
  };
  Verification v;
  const auto dq = widen(ref.dq), dk = widen(ref.dk), dv = widen(ref.dv);
  auto at = [](const HostTensor& t) { return index_in({t.shape().b, t.shape().h, t.shape().n, t.shape().d}); };
  const Shape4 q = got.o.shape();
  v.reports = {compare("dQ", got.dq.to_float(), dq, gradient_tolerance(dq, grad_rel_tol), at(got.dq)),
               compare("dK", got.dk.to_float(), dk, gradient_tolerance(dk, grad_rel_tol), at(got.dk)),
               compare("dV", got.dv.to_float(), dv, gradient_tolerance(dv, grad_rel_tol), at(got.dv)),
               compare("O", got.o.to_float(), ref.o.to_float(), kFloat32Tol, at(got.o)),
               compare("LSE", got.lse.values(), ref.lse.values(), kFloat32Tol, index_in({q.b, q.h, q.n}))};
  v.how = "all rows";
  return v;
}

}  // namespace fa
