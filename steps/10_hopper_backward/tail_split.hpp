// tail_split.hpp — the last wave of the key-tile kernel split into pieces (rung 14, without the
// mask). Plain C++ that the kernel and the launch call and a CPU test checks (tests/test_tail_split.cpp).
//
// Without the mask every block does the same work, one block fits an SM, and the blocks start in
// waves of one per SM. At the paper's shapes there are 4096 blocks at D = 64 and 2048 at D = 128 on
// the H100's 132 SMs: 31 full waves and a last one of 4 blocks, or 15 and a last of 68. The last
// wave takes a whole block's time however few blocks it holds, so about 3 % of the SMs' time is
// idle at both head dims (1 − 31.03 / 32, 1 − 15.52 / 16). Here the last key tiles are walked by
// several blocks each, every piece a share of the tile's query steps, so that the end comes
// sooner; the pieces add their dK and dV into a float32 buffer (atomics), converted after.
//
// Which tiles to split and into how many pieces is a small search over a model of the launch: a
// whole tile takes `steps` + `piece_cost` (its loads of K and V before, its dK and dV after), a
// piece its share of the steps, rounded up, plus the same cost; the blocks start in waves of `slots`.
// The tail's tiles, or the tail and one or two full waves before it, are split into 2 .. steps
// pieces; nothing is split where that would not end sooner.
#pragma once

#include "fa/host_device.hpp"

namespace fa::step10 {

struct TailSplit {
  long long whole_blocks = 0;  // blocks 0 .. whole_blocks − 1 own a whole key tile each (index order;
                               // every block, whatever this says, when split_tiles = 0)
  long long split_tiles = 0;   // the key tiles after them, each walked by `pieces` blocks
  int pieces = 1;
  float* dk = nullptr;  // float32 [split_tiles][Bc][D]: the pieces' sums of dK and dV (zeroed before)
  float* dv = nullptr;
};

// What block `block` (the linear index) does: key tile `tile` (the linear index of whole tiles,
// index order), part `part` of `pieces` of its walk (piece_first_step); `idle` for the grid's
// padding after the last piece. Nothing split (split_tiles = 0): every block its own tile.
struct BlockPiece {
  long long tile;
  int part, pieces;
  bool idle;
};

FA_HOST_DEVICE constexpr BlockPiece block_piece(long long block, const TailSplit& split) {
  if (split.split_tiles == 0 || block < split.whole_blocks) return {block, 0, 1, false};
  const long long p = block - split.whole_blocks;
  if (p >= split.split_tiles * split.pieces) return {0, 0, 1, true};
  return {split.whole_blocks + p / split.pieces, static_cast<int>(p % split.pieces), split.pieces, false};
}

// The first step of part `part` of `pieces` of a walk of `steps` (part = pieces gives its end):
// the pieces differ by one step at most.
FA_HOST_DEVICE constexpr int piece_first_step(int steps, int part, int pieces) {
  return static_cast<int>(static_cast<long long>(steps) * part / pieces);
}

// The modelled time of the blocks from `whole_waves` waves on: `split_tiles` tiles in `pieces` pieces.
constexpr double split_end(long long split_tiles, int pieces, long long slots, int steps, double piece_cost) {
  const long long blocks = split_tiles * pieces, rounds = (blocks + slots - 1) / slots;
  const int longest = (steps + pieces - 1) / pieces;
  return static_cast<double>(rounds) * (longest + piece_cost);
}

// The split for `tiles` key tiles of `steps` steps each, `slots` blocks resident at once; nothing
// split (whole_blocks = tiles) where no split ends sooner in the model.
constexpr TailSplit plan_tail_split(long long tiles, long long slots, int steps, double piece_cost) {
  TailSplit best{tiles, 0, 1};
  if (slots <= 0 || steps < 2 || tiles <= 0) return best;
  const long long tail = tiles % slots;
  if (tail == 0) return best;  // whole waves: nothing idles at the end
  // The end as it is: the waves before the tail plus one for the tail, counted from where the
  // split may start (the tail alone, or with one or two full waves before it).
  double best_saving = 0.0;
  for (long long extra_waves = 0; extra_waves <= 2; ++extra_waves) {
    const long long split_tiles = tail + extra_waves * slots;
    if (split_tiles > tiles) break;
    const double unsplit = static_cast<double>(extra_waves + 1) * (steps + piece_cost);
    for (int pieces = 2; pieces <= steps; ++pieces) {
      const double saving = unsplit - split_end(split_tiles, pieces, slots, steps, piece_cost);
      if (saving > best_saving + 1e-9) {
        best_saving = saving;
        best = TailSplit{tiles - split_tiles, split_tiles, pieces};
      }
    }
  }
  return best;
}

// The blocks a split launch needs (whole tiles, then the pieces).
constexpr long long split_blocks(const TailSplit& split) { return split.whole_blocks + split.split_tiles * split.pieces; }

}  // namespace fa::step10
