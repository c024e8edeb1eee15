// block_order.hpp — which key tile and which K/V head a block of the key-tile kernel owns. The grid
// is (key tiles, K/V heads), and blocks start about in the order of their linear index,
// blockIdx.x + key_tiles · blockIdx.y, as SMs free up. Plain C++ that the kernel calls and a CPU
// test checks (tests/test_block_order.cpp).
//
// In index order (rungs 1 to 12) block b owns key tile b mod key_tiles of head b / key_tiles: a
// head's key tiles are neighbours, so the blocks resident together stream the same Q and dO
// through L2. Without the mask every block does the same work. With it, key tile j sees the
// queries from its diagonal on, so the work falls with j, and the heaviest block of the last head,
// its key tile 0, starts when the grid is nearly done: the SMs that finish their last short
// blocks then wait for it. Heavy first (rung 13) starts the long blocks early and lets the short
// ones fill the end, the rule of largest first for jobs shared among machines, while keeping the
// L2 sharing: in groups of kHeadsTogether K/V heads, key tile 0 of each head of the group, then
// key tile 1 of each, and so on; then the next group. Four heads at N = 4k, D = 128 are about
// 24 MiB of Q, dO, K, V and dQ's accumulator, which fit the H100's 50 MiB of L2 (all heads at once
// would not). A group holds 4 · Nk / 128 blocks, at Nk ≥ 4k 128 or more, about a wave of the
// H100's 132 SMs: enough blocks of every length for the end to even out.
#pragma once

#include "fa/host_device.hpp"

namespace fa::step10 {

inline constexpr int kHeadsTogether = 4;

struct BlockTile {
  int key_tile, kv_head;
};

// Block `block` (the linear index) in index order: key tiles first, then heads.
FA_HOST_DEVICE constexpr BlockTile index_order_tile(long long block, int key_tiles) {
  return {static_cast<int>(block % key_tiles), static_cast<int>(block / key_tiles)};
}

// Block `block` heavy first: in groups of kHeadsTogether heads (the last may hold fewer), key
// tiles in increasing order, the group's heads in turn within each.
FA_HOST_DEVICE constexpr BlockTile heavy_first_tile(long long block, int key_tiles, int kv_heads) {
  const long long group_blocks = static_cast<long long>(kHeadsTogether) * key_tiles;
  const int first_head = static_cast<int>(block / group_blocks) * kHeadsTogether;
  const int heads = kv_heads - first_head < kHeadsTogether ? kv_heads - first_head : kHeadsTogether;
  const long long within = block - static_cast<long long>(first_head) * key_tiles;
  return {static_cast<int>(within / heads), first_head + static_cast<int>(within % heads)};
}

}  // namespace fa::step10
