// online_softmax_tile.cuh — stage 04's hole: the online softmax of one score tile, and the final
// normalization of the thread's rows (flash_forward_kernel.cuh's kernel calls both).
//
// Per thread: kRowsPerThread = 8 rows, 4 scores of each in this tile (the 16 threads of a half-warp
// share a row), the running max m' (log2 units: the scale and log2(e) are folded into Q), the
// partial row sum l over its own keys, and Õ, 8 x D/16 accumulators:
//   online_softmax_tile  m_new = max(m, rowmax S), alpha = exp2(m − m_new), P̃ = exp2(S − m_new) in
//                        place of S, l = alpha·l + rowsum P̃ (this thread's keys), Õ *= alpha, m = m_new
//   finish_rows          l summed across the half-warp, O = Õ / l, LSE = ln 2 · (m' + log2 l)
//
// Kept apart from the kernel, which includes it as <online_softmax_tile.cuh> (after the tile
// constants and KernelArgs it uses), because it is exercise ex04: the learner's copy
// (exercises/04_cuda_flash_forward/online_softmax_tile.cuh) has the two marked regions emptied,
// and the exercise builds stage 04's own kernel against it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fa::step04::detail {

// Folds one tile of scores s (log2 units, masked keys at −inf) into the rows' m, l and Õ; after
// it, s holds P̃.
template <int kCols>
__device__ __forceinline__ void online_softmax_tile(float (&s)[kRowsPerThread][kKeysPerThread], float (&m)[kRowsPerThread],
                                                    float (&l)[kRowsPerThread], float (&o)[kRowsPerThread][kCols]) {
  // >>> ex04:online_softmax
  // Fold this tile into m, l and Õ for each of the thread's 8 rows. After it, s holds P̃.
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    // The row's max over this tile: 4 keys here, then across the 16 threads that share the row.
    float tile_max = fmaxf(fmaxf(s[i][0], s[i][1]), fmaxf(s[i][2], s[i][3]));
#pragma unroll
    for (int lane_mask = 1; lane_mask < 16; lane_mask <<= 1)
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, lane_mask));
    const float m_new = fmaxf(m[i], tile_max);
    // A row that has seen no key yet keeps m = −inf; subtracting 0 instead keeps exp2 away from
    // (−inf) − (−inf) = NaN: its P̃ is exp2(−inf) = 0 and its alpha exp2(−inf) = 0 (l, Õ are 0).
    const float m_use = m_new == kNegInf ? 0.f : m_new;
    // exp(m_old − m_new) moves everything summed so far onto the new max: ≤ 1, exactly 1 when
    // the max did not change, and 0 on the row's first visible tile.
    const float alpha = exp2f(m[i] - m_use);
    float row_sum = 0.f;
#pragma unroll
    for (int j = 0; j < kKeysPerThread; ++j) {
      s[i][j] = exp2f(s[i][j] - m_use);  // every exponent ≤ 0: no overflow, even at scores of 200
      row_sum += s[i][j];
    }
    l[i] = alpha * l[i] + row_sum;  // this thread's 4 keys only: reduced across the row at the end
#pragma unroll
    for (int c = 0; c < kCols; ++c) o[i][c] *= alpha;
    m[i] = m_new;
  }
  // <<< ex04:online_softmax
}

// Once per row, after the last tile: O and LSE of the thread's rows to device memory.
template <int D, class Cols = OutCols<D>>
__device__ __forceinline__ void finish_rows(const float (&o)[kRowsPerThread][Cols::kCount], const float (&m)[kRowsPerThread],
                                            const float (&l)[kRowsPerThread], const KernelArgs& a, std::int64_t bh, int i0,
                                            int ty, int tx) {
  // >>> ex04:finish
  // Once per row: l summed across the 16 threads of the row, O = Õ / l, LSE = ln2 · (m' + log2 l).
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    float row_sum = l[i];
#pragma unroll
    for (int lane_mask = 1; lane_mask < 16; lane_mask <<= 1)
      row_sum += __shfl_xor_sync(0xffffffffu, row_sum, lane_mask);
    const int row = i0 + ty + 8 * i;
    if (row >= a.seq_q) continue;  // padding rows of the last Q tile
    // l = 0 only for a row that saw no key: then Õ = 0 too, and O = 0, LSE = −inf (not NaN).
    const float inv_l = row_sum > 0.f ? 1.f / row_sum : 0.f;
    float* const o_row = a.o + (bh * a.seq_q + row) * D;
#pragma unroll
    for (int k = 0; k < Cols::kChunks; ++k) {
      const int col = (k * 16 + tx) * Cols::kVec;
      if constexpr (Cols::kVec == 4)
        *reinterpret_cast<float4*>(o_row + col) = make_float4(o[i][4 * k] * inv_l, o[i][4 * k + 1] * inv_l,
                                                              o[i][4 * k + 2] * inv_l, o[i][4 * k + 3] * inv_l);
      else
        *reinterpret_cast<float2*>(o_row + col) = make_float2(o[i][2 * k] * inv_l, o[i][2 * k + 1] * inv_l);
    }
    if (tx == 0) a.lse[bh * a.seq_q + row] = row_sum > 0.f ? kLn2 * (m[i] + log2f(row_sum)) : kNegInf;
  }
  // <<< ex04:finish
}

}  // namespace fa::step04::detail
