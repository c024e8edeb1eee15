// rows.cuh — which rows of a head a block's sequence holds: a compile-time policy that a kernel takes
// as a template parameter and a launch passes in as a value (FlashAttention-3's seqlen.h plays the
// same part beside its mainloop). Stage 09's kernel is written for DenseRows; stage 12 passes
// PackedRows for a packed batch of variable lengths.
//
// Dense: every batch entry is its own head (B·H heads of Nq query and Nk key rows). Packed
// (fa/packed.hpp): the B sequences one after the other in every head's rows, [1, H, Σ L_s, D],
// sequence s at rows cu_seqlens[s] .. cu_seqlens[s + 1]; the grid's z is the sequence, and a block
// runs its sequence as a problem of its own (Nq = Nk = L_s), its copies offset by the first row.
#pragma once

namespace fa::policies {

// The rows of the block's sequence: its first row in each head's rows, its query and key lengths,
// and the rows of one head (the stride between heads in O and LSE).
struct SequenceRows {
  int first, seq_q, seq_k, head_rows;
};

// One sequence per batch entry: the launch's lengths as they are, from row 0.
struct DenseRows {
  static constexpr bool kPacked = false;
  __device__ __forceinline__ SequenceRows sequence(int seq_q, int seq_k) const { return {0, seq_q, seq_k, seq_q}; }
  // Whether a query tile starting at row i0 lies past the sequence (never: the grid fits it).
  __device__ __forceinline__ static bool past_end(int /*i0*/, const SequenceRows& /*rows*/) { return false; }
};

// A packed batch: cu_seqlens is a device array of B + 1 offsets; the launch's lengths are the rows
// of a head (Σ L_s), and the grid's x covers the longest sequence's query tiles, so a block whose
// tile is past its own sequence's end has nothing to do.
struct PackedRows {
  static constexpr bool kPacked = true;
  const int* cu_seqlens = nullptr;
  __device__ __forceinline__ SequenceRows sequence(int head_rows, int /*seq_k*/) const {
    const int first = cu_seqlens[blockIdx.z];
    const int length = cu_seqlens[blockIdx.z + 1] - first;
    return {first, length, length, head_rows};
  }
  __device__ __forceinline__ static bool past_end(int i0, const SequenceRows& rows) { return i0 >= rows.seq_q; }
};

}  // namespace fa::policies
