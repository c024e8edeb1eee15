// problem.hpp — the one problem description that every stage takes.
//
// Tensors are [B, H, N, D], contiguous and row-major. LSE is [B, H, Nq] (float32, natural log).
// Causal means query i sees key j iff j <= i + (Nk - Nq): the mask is aligned to the bottom-right
// corner, so for Nq = Nk it is the usual lower triangle, and when Nq < Nk the queries are the last
// Nq positions of the sequence (as in decoding with a KV cache).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace fa {

// Thrown for bad usage or bad input: the executables print its message on one line and exit 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Problem {
  std::int64_t batch = 1;    // B
  std::int64_t heads = 1;    // H
  std::int64_t seq_q = 1;    // Nq, query rows per head
  std::int64_t seq_k = 1;    // Nk, key/value rows per head
  std::int64_t dim = 64;     // D, head dimension
  bool causal = false;
  float scale = 0.0f;        // softmax scale; 0 means the default 1/sqrt(D)

  float softmax_scale() const;

  std::int64_t heads_total() const { return batch * heads; }
  std::int64_t q_elements() const { return batch * heads * seq_q * dim; }
  std::int64_t kv_elements() const { return batch * heads * seq_k * dim; }
  std::int64_t lse_elements() const { return batch * heads * seq_q; }

  // Causal visibility: key j is visible to query i iff j < keys_visible(i).
  std::int64_t causal_offset() const { return seq_k - seq_q; }
  std::int64_t keys_visible(std::int64_t i) const;  // in [0, Nk]; Nk when not causal
  bool visible(std::int64_t i, std::int64_t j) const { return j < keys_visible(i); }
  double visible_pairs_per_head() const;            // sum over i of keys_visible(i)

  // FLOPs as the papers count them: 4·B·H·Nq·Nk·D forward, halved for causal (for Nq != Nk the
  // visible pairs are counted exactly), backward 2.5x forward.
  double flops_forward() const;
  double flops_backward() const { return 2.5 * flops_forward(); }
  // The bytes any forward must move at least: read Q, K, V once, write O and LSE once (float32).
  double bytes_forward_min() const;

  std::string describe() const;  // "B=1 H=2 Nq=512 Nk=512 D=64 causal"
  void validate() const;         // throws UsageError on a shape no stage can run
};

}  // namespace fa
