// packed.hpp — a packed variable-length batch (problem.hpp) as the B separate problems it holds.
//
// Packed, every tensor is [1, H, total, D]: head h's rows cu_seqlens[s] .. cu_seqlens[s+1] are
// sequence s (L_s tokens), so each (head, sequence) is a contiguous [L_s, D] block:
//
//   head 0:  | seq 0 (L_0 rows) | seq 1 (L_1 rows) | ... |      cu_seqlens = 0, L_0, L_0 + L_1, ...
//   head 1:  | seq 0            | seq 1            | ... |
//
// A kernel reaches sequence s of head h at (h·total + cu_seqlens[s])·D, with the row stride D of
// every other stage. (FlashAttention's varlen functions take [total, H, D], token-major: the
// same blocks with a row stride of H·D.) The reference and the checks work one sequence at a time:
// sequence s is the problem sequence_problem(p, s) — batch 1, Nq = Nk = L_s — on the inputs
// sequence_inputs(p, in, s); a packed result is put together from those with place_sequence.
#pragma once

#include <cstdint>

#include "fa/problem.hpp"
#include "fa/reference.hpp"
#include "fa/tensor.hpp"

namespace fa {

// Sequence s of a packed problem, alone: batch 1, Nq = Nk = L_s, not packed.
Problem sequence_problem(const Problem& packed, std::int64_t s);
// Its rows of Q, K, V (and dO where present), copied: [1, H, L_s, D] in the inputs' dtype.
AttentionData sequence_inputs(const Problem& packed, const AttentionData& in, std::int64_t s);
// Its rows of a packed result's O and LSE, copied.
AttentionResult sequence_result(const Problem& packed, const AttentionResult& out, std::int64_t s);
// Writes one sequence's O and LSE (shaped as sequence_problem's) into a packed result's rows.
void place_sequence(const Problem& packed, std::int64_t s, const AttentionResult& one, AttentionResult& out);

// The float64 reference of a packed batch: each sequence's own attention, its queries against its
// own keys only (causal within the sequence), in the packed layout: o [H, total, D], lse [H, total].
ReferenceF64 reference_packed_f64(const Problem& packed, const AttentionData& in);

}  // namespace fa
