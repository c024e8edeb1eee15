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
//
// Without the mask that order makes a queue: all of a head's key tiles reach query tile 0 at once,
// and each waits for the one before it to hand its turn on, half a step later, so key tile j runs
// j / 2 steps late. Rotated, the walks are staggered instead: key tile j starts at step j of the
// block's walk (the G query heads' query tiles, one after another) and wraps round, so it reaches
// step x at its own step (x − j) mod steps, and the turns go in the order of arrival. Each key
// tile then finds its turn handed on by a key tile that came one step before it, and no block
// waits in the steady state; but key tile j waits for j + 1, and the last for the first, so a
// head's key tiles must all be resident at once, or the wait never ends. The host rotates only
// when every step is reached by at most one key tile (key tiles ≤ steps) and the GPU holds all of
// a head's key tiles at once (DqTurns::rotated).
#pragma once

#include "fa/host_device.hpp"

namespace fa::step10 {

// What the ordered launch gives its kernel: one count per query head and query tile, and whether
// the walks are rotated (without the mask, when a head's key tiles fit on the GPU at once).
struct DqTurns {
  int* counts = nullptr;
  int query_tiles = 0;  // per query head
  bool rotated = false;
};

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

// Rotated (no mask, key tiles ≤ steps): the step of the block's walk that key tile `key_tile`
// takes at its own step m, and its turn at step x of the walk: key tiles x, x − 1, ..., 0 (those
// there are) arrive first, at their steps 0, 1, ...; then the last key tile, the one below, ..., x + 1.
FA_HOST_DEVICE constexpr int rotated_step(int m, int key_tile, int steps) { return (m + key_tile) % steps; }
FA_HOST_DEVICE constexpr int rotated_turn(int key_tile, int key_tiles, int x) {
  return key_tile <= x ? (x < key_tiles ? x : key_tiles - 1) - key_tile : x + key_tiles - key_tile;
}

}  // namespace fa::step10
