#include "fa/reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <tuple>

#include "fa/packed.hpp"
#include "fa/parallel.hpp"
#include "fa/random.hpp"

namespace fa {

namespace {

HostTensor float32_copy(const HostTensor& t) { return t.dtype() == DType::float32 ? t : t.converted(DType::float32); }

struct RowPointers {
  const float *q, *k, *v;
};
RowPointers row_pointers(const Problem& p, const AttentionData& in, RowId r) {
  const std::int64_t kv_head = r.h / (p.heads / p.kv_heads());  // grouped-query: shared K/V heads
  return {in.q.data() + in.q.head_offset(r.b, r.h) + r.i * p.dim, in.k.data() + in.k.head_offset(r.b, kv_head),
          in.v.data() + in.v.head_offset(r.b, kv_head)};
}

}  // namespace

HostTensor head_float32(const HostTensor& t, std::int64_t b, std::int64_t h) {
  const Shape4 s = t.shape();
  HostTensor out(Shape4{1, 1, s.n, s.d});
  float* to = out.data();
  const std::int64_t from = t.head_offset(b, h);
  parallel_ranges(s.n * s.d, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t e = begin; e < end; ++e) to[e] = t.get(from + e);
  });
  return out;
}

AttentionData as_float32(const AttentionData& in) {
  AttentionData out;
  out.q = float32_copy(in.q);
  out.k = float32_copy(in.k);
  out.v = float32_copy(in.v);
  if (in.d_o.numel() > 0) out.d_o = float32_copy(in.d_o);
  return out;
}

void reference_row_f64(const Problem& p, const AttentionData& in, RowId r, double* o, double* lse) {
  const std::int64_t D = p.dim;
  const std::int64_t visible = p.keys_visible(r.i);
  const double scale = p.softmax_scale();
  std::fill(o, o + D, 0.0);
  if (visible == 0) {
    *lse = -std::numeric_limits<double>::infinity();
    return;
  }
  const auto [q, k, v] = row_pointers(p, in, r);
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

std::int64_t reference_rows_per_thread(const Problem& p) {
  return std::max<std::int64_t>(2, (std::int64_t{1} << 22) / std::max<std::int64_t>(p.seq_k * p.dim, 1));
}

void plain_row(const Problem& p, const AttentionData& in, RowId r, float* o, float* lse) {
  const std::int64_t D = p.dim;
  const std::int64_t visible = p.keys_visible(r.i);
  const float scale = p.softmax_scale();
  std::fill(o, o + D, 0.0f);
  if (visible == 0) {
    *lse = -std::numeric_limits<float>::infinity();
    return;
  }
  const auto [q, k, v] = row_pointers(p, in, r);
  std::vector<float> s(static_cast<std::size_t>(visible));
  float m = -std::numeric_limits<float>::infinity();
  for (std::int64_t j = 0; j < visible; ++j) {
    float dot = 0.0f;
    for (std::int64_t d = 0; d < D; ++d) dot += q[d] * k[j * D + d];
    s[j] = scale * dot;
    m = std::max(m, s[j]);
  }
  float l = 0.0f;
  for (std::int64_t j = 0; j < visible; ++j) {
    s[j] = std::exp(s[j] - m);
    l += s[j];
    s[j] = round_to(p.dtype, s[j]);  // a tensor-core kernel feeds P to P·V in the inputs' type
  }
  for (std::int64_t j = 0; j < visible; ++j)
    for (std::int64_t d = 0; d < D; ++d) o[d] += s[j] * v[j * D + d];
  for (std::int64_t d = 0; d < D; ++d) o[d] = round_to(p.dtype, o[d] / l);
  *lse = m + std::log(l);
}

ReferenceF64 reference_attention_f64(const Problem& p, const AttentionData& in_any) {
  if (p.packed()) return reference_packed_f64(p, in_any);  // one sequence at a time (packed.hpp)
  const AttentionData in = as_float32(in_any);
  ReferenceF64 ref;
  ref.o.resize(static_cast<std::size_t>(p.q_elements()));
  ref.lse.resize(static_cast<std::size_t>(p.lse_elements()));
  // Every row alone, on every core (the same numbers as one loop).
  const std::vector<RowId> rows = all_rows(p);
  parallel_ranges(
      static_cast<std::int64_t>(rows.size()),
      [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t n = begin; n < end; ++n) {
          const RowId& r = rows[static_cast<std::size_t>(n)];
          const std::int64_t row = (r.b * p.heads + r.h) * p.seq_q + r.i;
          reference_row_f64(p, in, r, ref.o.data() + row * p.dim, ref.lse.data() + row);
        }
      },
      1, reference_rows_per_thread(p));
  return ref;
}

void reference_forward_f64(const Problem& p, const AttentionData& in, AttentionResult& out) {
  const ReferenceF64 ref = reference_attention_f64(p, in);
  for (std::size_t n = 0; n < ref.o.size(); ++n) out.o.set(static_cast<std::int64_t>(n), static_cast<float>(ref.o[n]));
  std::transform(ref.lse.begin(), ref.lse.end(), out.lse.values().begin(), [](double x) { return static_cast<float>(x); });
}

std::vector<RowId> all_rows(const Problem& p) {
  std::vector<RowId> rows;
  rows.reserve(static_cast<std::size_t>(p.lse_elements()));
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads; ++h)
      for (std::int64_t i = 0; i < p.seq_q; ++i) rows.push_back({b, h, i});
  return rows;
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

}  // namespace fa
