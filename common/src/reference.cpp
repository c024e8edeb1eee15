#include "fa/reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <tuple>

#include "fa/random.hpp"

namespace fa {

void reference_row_f64(const Problem& p, const AttentionData& in, RowId r, double* o, double* lse) {
  const std::int64_t D = p.dim;
  const std::int64_t visible = p.keys_visible(r.i);
  const double scale = p.softmax_scale();
  std::fill(o, o + D, 0.0);
  if (visible == 0) {
    *lse = -std::numeric_limits<double>::infinity();
    return;
  }
  const float* q = in.q.data() + in.q.head_offset(r.b, r.h) + r.i * D;
  const float* k = in.k.data() + in.k.head_offset(r.b, r.h);
  const float* v = in.v.data() + in.v.head_offset(r.b, r.h);
  std::vector<double> s(static_cast<std::size_t>(visible));
  double m = -std::numeric_limits<double>::infinity();
  for (std::int64_t j = 0; j < visible; ++j) {
    double dot = 0.0;
    for (std::int64_t d = 0; d < D; ++d) dot += static_cast<double>(q[d]) * k[j * D + d];
    s[j] = scale * dot;
    m = std::max(m, s[j]);
  }
  double l = 0.0;
  for (std::int64_t j = 0; j < visible; ++j) l += std::exp(s[j] - m);
  *lse = m + std::log(l);
  for (std::int64_t j = 0; j < visible; ++j) {
    const double pj = std::exp(s[j] - *lse);
    for (std::int64_t d = 0; d < D; ++d) o[d] += pj * v[j * D + d];
  }
}

ReferenceF64 reference_attention_f64(const Problem& p, const AttentionData& in) {
  ReferenceF64 ref;
  ref.o.resize(static_cast<std::size_t>(p.q_elements()));
  ref.lse.resize(static_cast<std::size_t>(p.lse_elements()));
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads; ++h)
      for (std::int64_t i = 0; i < p.seq_q; ++i) {
        const std::int64_t row = (b * p.heads + h) * p.seq_q + i;
        reference_row_f64(p, in, {b, h, i}, ref.o.data() + row * p.dim, ref.lse.data() + row);
      }
  return ref;
}

void reference_forward_f64(const Problem& p, const AttentionData& in, AttentionResult& out) {
  const ReferenceF64 ref = reference_attention_f64(p, in);
  auto to_float = [](double x) { return static_cast<float>(x); };
  std::transform(ref.o.begin(), ref.o.end(), out.o.values().begin(), to_float);
  std::transform(ref.lse.begin(), ref.lse.end(), out.lse.values().begin(), to_float);
}

std::vector<RowId> sample_rows(const Problem& p, int count, std::uint64_t seed) {
  std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t>> picked;
  const std::int64_t last_b = p.batch - 1, last_h = p.heads - 1, last_i = p.seq_q - 1;
  picked.insert({0, 0, 0});
  picked.insert({0, 0, last_i});
  picked.insert({last_b, last_h, 0});
  picked.insert({last_b, last_h, last_i});
  if (p.causal) {
    // The first row that sees any key, where the diagonal starts.
    const std::int64_t first_seeing = std::clamp<std::int64_t>(-p.causal_offset(), 0, last_i);
    picked.insert({0, 0, first_seeing});
  }
  Rng rng(seed ^ 0xA5A5A5A5ull);
  for (int n = 0; n < count; ++n) {
    const auto b = static_cast<std::int64_t>(rng.uniform() * p.batch);
    const auto h = static_cast<std::int64_t>(rng.uniform() * p.heads);
    const auto i = static_cast<std::int64_t>(rng.uniform() * p.seq_q);
    picked.insert({b, h, i});
  }
  std::vector<RowId> rows;
  for (const auto& [b, h, i] : picked) rows.push_back({b, h, i});
  return rows;
}

Problem one_row_problem(const Problem& p, RowId row) {
  Problem q = p;
  q.batch = q.heads = 1;
  q.seq_q = 1;
  q.seq_k = p.keys_visible(row.i);
  q.causal = false;  // the visible keys are exactly the ones kept
  q.scale = p.softmax_scale();
  return q;
}

AttentionData one_row_inputs(const Problem& p, const AttentionData& in, RowId row) {
  const Problem q = one_row_problem(p, row);
  AttentionData out{HostTensor(q_shape(q)), HostTensor(kv_shape(q)), HostTensor(kv_shape(q))};
  const std::int64_t D = p.dim;
  std::memcpy(out.q.data(), in.q.data() + in.q.head_offset(row.b, row.h) + row.i * D, D * sizeof(float));
  const std::size_t kv_bytes = static_cast<std::size_t>(q.seq_k * D) * sizeof(float);
  if (kv_bytes) {
    std::memcpy(out.k.data(), in.k.data() + in.k.head_offset(row.b, row.h), kv_bytes);
    std::memcpy(out.v.data(), in.v.data() + in.v.head_offset(row.b, row.h), kv_bytes);
  }
  return out;
}

}  // namespace fa
