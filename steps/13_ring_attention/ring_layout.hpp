// ring_layout.hpp — where stage 13's GPU code keeps a rank's part of the sequence: plain C++, so that
// the CPU tests check it. A rank's chunk of a [B, H, N, D] tensor is its own contiguous
// [B, H, length, D] tensor (what the single-GPU kernels take); a K/V block is its owner's chunks'
// K and V one after the other in one buffer, so that one transfer moves it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "13_ring_attention/ring_schedule.hpp"
#include "fa/problem.hpp"
#include "fa/tensor.hpp"

namespace fa::step13 {

// A block's buffer: for each of its owner's chunks, K then V, each [B, H, length, D] of `element`
// bytes a number (the dtype's for K/V; 4 for the float32 dK/dV sums that travel in the backward).
struct BlockLayout {
  std::vector<Chunk> chunks;
  std::vector<std::size_t> k_at, v_at;  // byte offsets of each chunk's K and V
  std::size_t bytes = 0;                // the whole block
};
BlockLayout block_layout(const Problem& p, const std::vector<Chunk>& chunks, std::size_t element);

// [B, H, rows, width]: a chunk's tensor (width D), or its LSE (width 1).
inline Shape4 rows_shape(const Problem& p, std::int64_t rows, std::int64_t width) {
  return Shape4{p.batch, p.heads, rows, width};
}

// The rows of chunk c of every head of a whole-sequence [B, H, N, W] host tensor, as a
// [B, H, c.length, W] tensor of the same dtype (take_rows), and back into their places (place_rows).
HostTensor take_rows(const HostTensor& whole, Chunk c);
void place_rows(HostTensor& whole, const HostTensor& part, Chunk c);

}  // namespace fa::step13
