// dq_turns.hpp — the deterministic variant's order (ladder/v3_dq_by_tma.cuh with kOrdered): which
// key tile a block owns, and how many key tiles add their share of a query tile's dQ before it
// does. Plain C++ that the kernel calls and a CPU test checks (tests/test_dq_turns.cpp: each query
// tile's key tiles take the turns 0, 1, 2, ... once each, and blocks started in the order of their
// index never wait for one that has not started).
//
// Without the mask every key tile walks the query tiles from the first, and the turns go by key
// tile: 0, 1, 2, .... With it (bottom-right: key ≤ query + Nk − Nq), the key tiles that see query
// tile i are 0 .. J(i), and key tile j starts its walk on its diagonal, Bc / Br query tiles after
// key tile j − 1's start: it reaches tile i that many steps earlier. So the turns go J(i), J(i) − 1,
// ..., 0, the order of arrival, and the last key tile must start first, so that the tile a block
// waits for has started.
#pragma once

#include "fa/host_device.hpp"

namespace fa::step10 {

// The key tile of block `block` (blockIdx.x) of the ordered launch's `key_tiles`.
FA_HOST_DEVICE constexpr int ordered_key_tile(bool causal, int block, int key_tiles) {
  return causal ? key_tiles - 1 - block : block;
}

// The turn of key tile `key_tile` at the query tile whose first row is q0 (Br rows, Bc keys a
// tile): the number of key tiles that add their share before it. Only for a key tile that sees
// the query tile.
FA_HOST_DEVICE constexpr int dq_turn(bool causal, int key_tile, int key_tiles, int q0, int br, int bc, int seq_q,
                                     int seq_k) {
  if (!causal) return key_tile;
  const int last_row = (q0 + br < seq_q ? q0 + br : seq_q) - 1;
  const int last_key_tile = (last_row + seq_k - seq_q) / bc;  // J: the last key tile that sees the row
  return (last_key_tile < key_tiles - 1 ? last_key_tile : key_tiles - 1) - key_tile;
}

}  // namespace fa::step10
