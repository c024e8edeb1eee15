// reference.hpp — attention in float64, straight from the definition, one row at a time.
//
//   s_j = scale * q_i . k_j       for the keys j that row i sees
//   m = max_j s_j,  l = sum_j exp(s_j - m),  LSE_i = m + log(l)
//   o_i = sum_j exp(s_j - LSE_i) v_j
// A row that sees no key gives o_i = 0 and LSE_i = -inf. This is the ground truth of the tests
// and of sampled-row verification: it needs no N x N memory and each row is independent.
#pragma once

#include <cstdint>
#include <vector>

#include "fa/tensor.hpp"

namespace fa {

struct RowId {
  std::int64_t b = 0, h = 0, i = 0;
};

// One output row in float64: o (D values) and its LSE.
void reference_row_f64(const Problem& p, const AttentionData& in, RowId row, double* o, double* lse);

// All rows: o is [B,H,Nq,D], lse is [B,H,Nq], both float64.
struct ReferenceF64 {
  std::vector<double> o, lse;
};
ReferenceF64 reference_attention_f64(const Problem& p, const AttentionData& in);
// The same, rounded to float32 outputs: the reference a stage's harness compares with
// (the shape of fa::ForwardFn).
void reference_forward_f64(const Problem& p, const AttentionData& in, AttentionResult& out);

// Which rows to check when a full comparison is too slow or too large: the first and last row of
// the first and last head (the edges where masks and tails go wrong), the causal rows that see
// the fewest keys, and `count` more drawn with the seed.
std::vector<RowId> sample_rows(const Problem& p, int count, std::uint64_t seed);

// The same problem restricted to one query row: Nq = 1 and only the keys that row sees. Its
// answer is row `row` of the full problem; this is how a previous stage verifies any N.
Problem one_row_problem(const Problem& p, RowId row);
AttentionData one_row_inputs(const Problem& p, const AttentionData& in, RowId row);

}  // namespace fa
