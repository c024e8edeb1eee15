#include "fa/problem.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace fa {

float Problem::softmax_scale() const {
  return scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(dim));
}

std::int64_t Problem::keys_visible(std::int64_t i) const {
  if (!causal) return seq_k;
  return std::clamp<std::int64_t>(i + causal_offset() + 1, 0, seq_k);
}

double Problem::visible_pairs_per_head() const {
  if (!causal) return static_cast<double>(seq_q) * static_cast<double>(seq_k);
  double pairs = 0;
  for (std::int64_t i = 0; i < seq_q; ++i) pairs += static_cast<double>(keys_visible(i));
  return pairs;
}

double Problem::flops_forward() const {
  const double full = 4.0 * batch * heads * static_cast<double>(seq_q) * seq_k * dim;
  if (!causal) return full;
  if (seq_q == seq_k) return 0.5 * full;  // the papers' convention for square causal attention
  return 4.0 * batch * heads * visible_pairs_per_head() * dim;
}

double Problem::bytes_forward_min() const {
  return 4.0 * (2.0 * q_elements() + 2.0 * kv_elements() + lse_elements());
}

std::string Problem::describe() const {
  std::ostringstream s;
  s << "B=" << batch << " H=" << heads;
  if (seq_q == seq_k) s << " N=" << seq_q;
  else s << " Nq=" << seq_q << " Nk=" << seq_k;
  s << " D=" << dim << (causal ? " causal" : "");
  return s.str();
}

void Problem::validate() const {
  auto positive = [](std::int64_t v, const char* name) {
    if (v < 1) throw UsageError(std::string(name) + " must be at least 1, got " + std::to_string(v));
  };
  positive(batch, "--batch");
  positive(heads, "--heads");
  positive(seq_q, "--seq-q");
  positive(seq_k, "--seq-k");
  positive(dim, "--dim");
  if (!std::isfinite(scale) || scale < 0.0f)
    throw UsageError("--scale must be a positive finite number (or 0 for 1/sqrt(D))");
}

}  // namespace fa
