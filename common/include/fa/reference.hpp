// reference.hpp — attention in float64, straight from the definition, one row at a time; and the
// plainest implementation in a kernel's precision, the yardstick of the tolerance (verify.hpp).
//
//   s_j = scale * q_i . k_j       for the keys j that row i sees
//   m = max_j s_j,  l = sum_j exp(s_j - m),  LSE_i = m + log(l)
//   o_i = sum_j exp(s_j - LSE_i) v_j
// A row that sees no key gives o_i = 0 and LSE_i = -inf. Query head h reads key/value head
// h / (Hq / Hkv). Inputs of any dtype are read as the values they hold.
#pragma once

#include <cstdint>
#include <vector>

#include "fa/tensor.hpp"

namespace fa {

struct RowId {
  std::int64_t b = 0, h = 0, i = 0;
};

// The same inputs as float32 tensors (a copy only when they are 16-bit).
AttentionData as_float32(const AttentionData& in);
// Head (b, h) of a tensor as a float32 [1, 1, N, D] tensor (a copy, in any dtype).
HostTensor head_float32(const HostTensor& t, std::int64_t b, std::int64_t h);

// One output row in float64: o (D values) and its LSE. `in` must be float32 (as_float32).
void reference_row_f64(const Problem& p, const AttentionData& in, RowId row, double* o, double* lse);
// The same row computed plainly in p.dtype's precision: float32 arithmetic in order, P rounded to
// p.dtype before P·V, O rounded to p.dtype. `in` must be float32 (as_float32).
void plain_row(const Problem& p, const AttentionData& in, RowId row, float* o, float* lse);
// The fewest rows a thread takes in a loop of such rows (parallel_ranges' serial_below): about 4 M
// multiply-adds of work each, so that short rows do not pay a thread's start.
std::int64_t reference_rows_per_thread(const Problem& p);

// All rows: o is [B,H,Nq,D], lse is [B,H,Nq], both float64 (a packed batch: [1,H,total,D] and
// [1,H,total], each sequence against its own keys: fa/packed.hpp).
struct ReferenceF64 {
  std::vector<double> o, lse;
};
ReferenceF64 reference_attention_f64(const Problem& p, const AttentionData& in);
// The same, rounded to float32 outputs (the shape of fa::ForwardFn).
void reference_forward_f64(const Problem& p, const AttentionData& in, AttentionResult& out);

// Which rows to check when a full comparison is too slow or too large: the first and last row of
// the first and last head (the edges where masks and tails go wrong), the causal rows that see
// the fewest keys, and `count` more drawn with the seed.
std::vector<RowId> sample_rows(const Problem& p, int count, std::uint64_t seed);
std::vector<RowId> all_rows(const Problem& p);

}  // namespace fa
