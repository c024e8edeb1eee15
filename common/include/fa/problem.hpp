// problem.hpp — the one problem description that every stage takes.
//
// Tensors are [B, H, N, D], contiguous and row-major: Q and O have H = Hq query heads, K and V
// Hkv key/value heads (Hq a multiple of Hkv; query head h reads key/value head h / (Hq / Hkv):
// grouped-query attention, multi-query at Hkv = 1). LSE is [B, Hq, Nq], float32, natural log.
// Causal means query i sees key j iff j <= i + (Nk - Nq): the mask is aligned to the bottom-right
// corner, so for Nq = Nk it is the usual lower triangle, and when Nq < Nk the queries are the last
// Nq positions of the sequence (as in decoding with a KV cache).
//
// A packed variable-length batch (seq_lens non-empty) holds B sequences of different lengths one
// after the other: tensors [1, H, total, D], sequence s at rows cu_seqlens[s] .. cu_seqlens[s+1]
// of every head, its queries and keys the same L_s tokens (prefill; causal within each sequence).
// Make one with packed_problem(); fa/packed.hpp splits it into the B problems it holds. No stage
// before 10 runs one: Problem::require rejects it with one line.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fa/dtype.hpp"

namespace fa {

// Text for a message that must stay one line on the user's terminal: control bytes (newline,
// escape, NUL...), the C1 controls' UTF-8 forms and every byte that is not well-formed UTF-8 (a
// lone 0x80..0x9F is a C1 control to a terminal in an 8-bit mode) become \xNN, so that a value
// typed or read from a file can neither split the message nor send a terminal escape sequence.
std::string one_line(std::string_view text);

// Thrown for bad usage or bad input: the executables print its message on one line and exit 2.
// The message is made one line here, whatever values it quotes (a NUL in one would otherwise cut
// what() short).
struct UsageError : std::runtime_error {
  explicit UsageError(std::string_view why) : std::runtime_error(one_line(why)) {}
};

// Forward only, or forward then backward.
enum class Pass { forward, backward };
const char* to_string(Pass pass);  // "fwd", "bwd" (the results file's words)

// What a stage can run, for Problem::require: anything else is refused with one line.
struct Supports {
  std::vector<DType> dtypes{DType::float32};
  std::vector<std::int64_t> dims;  // head dims; empty: any
  bool grouped_heads = false;      // Hkv < Hq
  bool variable_lengths = false;   // packed batches (seq_lens)
  bool has_dim(std::int64_t d) const { return dims.empty() || std::find(dims.begin(), dims.end(), d) != dims.end(); }
};

struct Problem {
  std::int64_t batch = 1;    // B
  std::int64_t heads = 1;    // Hq, query heads
  std::int64_t heads_kv = 0; // Hkv, key/value heads; 0 means Hq
  std::int64_t seq_q = 1;    // Nq, query rows per head
  std::int64_t seq_k = 1;    // Nk, key/value rows per head
  std::int64_t dim = 64;     // D, head dimension
  bool causal = false;
  float scale = 0.0f;        // softmax scale; 0 means the default 1/sqrt(D)
  DType dtype = DType::float32;          // of Q, K, V, O (and dO, dQ, dK, dV); LSE is float32
  std::vector<std::int64_t> seq_lens;    // packed variable-length batch: one length per sequence

  float softmax_scale() const;
  std::int64_t kv_heads() const { return heads_kv > 0 ? heads_kv : heads; }

  // A packed batch: B = seq_lens.size() sequences, Nq = Nk = the longest (FlashAttention's
  // max_seqlen), the tensors [1, H, total, D].
  bool packed() const { return !seq_lens.empty(); }
  std::int64_t total_tokens() const;           // Σ L_s (packed); B·Nq otherwise
  std::vector<std::int64_t> cu_seqlens() const;  // 0, L_0, L_0 + L_1, ..., total (B + 1 offsets)

  std::int64_t heads_total() const { return batch * heads; }
  std::int64_t q_elements() const { return heads * dim * (packed() ? total_tokens() : batch * seq_q); }
  std::int64_t kv_elements() const { return kv_heads() * dim * (packed() ? total_tokens() : batch * seq_k); }
  std::int64_t lse_elements() const { return heads * (packed() ? total_tokens() : batch * seq_q); }

  // Causal visibility: key j is visible to query i iff j < keys_visible(i).
  std::int64_t causal_offset() const { return seq_k - seq_q; }
  std::int64_t keys_visible(std::int64_t i) const;  // in [0, Nk]; Nk when not causal
  bool visible(std::int64_t i, std::int64_t j) const { return j < keys_visible(i); }
  double visible_pairs_per_head() const;            // sum over i of keys_visible(i)

  // FLOPs as the papers count them: 4·B·H·Nq·Nk·D forward, halved for causal (for Nq != Nk the
  // visible pairs are counted exactly), backward 2.5x forward. Packed: the sum over its sequences.
  double flops_forward() const;
  double flops_backward() const { return 2.5 * flops_forward(); }
  double flops(Pass pass) const { return pass == Pass::forward ? flops_forward() : flops_backward(); }
  // The bytes any pass must move at least. Forward: read Q, K, V once, write O and LSE once.
  // Backward: read Q, K, V, O, dO, LSE once, write dQ, dK, dV once.
  double bytes_min(Pass pass) const;
  // Bytes of the tensors a pass reads and writes (inputs, outputs, gradients), for memory checks.
  double bytes_io(Pass pass) const;

  std::string describe() const;  // "B=1 H=2 Nq=512 Nk=512 D=64 causal"
  // Throws UsageError on a shape no stage can run: sizes < 1, Hq not a multiple of Hkv, a bad
  // scale, or element counts that do not fit 64-bit arithmetic (B·H·N·D, and B·H·Nq·Nk).
  void validate() const;
  // validate(), then what this stage runs: "--dtype float16 is not supported by this stage (it
  // runs float32)".
  void require(const Supports& s) const;
};

// A packed batch of sequences of the given lengths, the rest of `base` kept: batch = the number of
// sequences, seq_q = seq_k = the longest. Throws UsageError on an empty list or a length < 1.
Problem packed_problem(Problem base, std::vector<std::int64_t> seq_lens);

}  // namespace fa
