// test_dq_turns.cpp — the deterministic variant's order on the CPU (dq_turns.hpp): for every query
// tile, the key tiles that see it (found here element by element, not by the kernel's formula) take
// the turns 0 .. n − 1 once each; and a model of the launch, with as many blocks resident as an SM
// count allows and blocks started in the order of their index, finishes without a block waiting
// for one that has not started. The same model with the turns in key-tile order and the masked
// launch reversed stops: the check can fail.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "../dq_turns.hpp"
#include "masked_tiles.hpp"

namespace {

struct Shape {
  int seq_q, seq_k, br, bc;
  bool causal;
  std::string describe() const {
    return "Nq=" + std::to_string(seq_q) + " Nk=" + std::to_string(seq_k) + " Br=" + std::to_string(br) +
           " Bc=" + std::to_string(bc) + (causal ? " causal" : "");
  }
};

using fa::step10::testing::ceil_div;

// Does key tile j see query tile i (always, without the mask)?
bool sees(const Shape& s, int j, int i) {
  return !s.causal || fa::step10::testing::key_tile_sees(j, i, s.seq_q, s.seq_k, s.br, s.bc);
}

using TurnFn = std::function<int(const Shape&, int key_tile, int key_tiles, int query_tile)>;
using TileFn = std::function<int(const Shape&, int block, int key_tiles)>;

int course_turn(const Shape& s, int j, int tiles, int i) {
  return fa::step10::dq_turn(s.causal, j, tiles, i * s.br, s.br, s.bc, s.seq_q, s.seq_k);
}
int course_tile(const Shape& s, int block, int tiles) { return fa::step10::ordered_key_tile(s.causal, block, tiles); }

// The launch modelled: `slots` blocks resident at once, started in the order of their index; each
// walks the query tiles it sees in increasing order and, at each, waits until the tile's count
// equals its turn, then adds (counts one more). Returns false if every resident block waits and
// none can start.
bool launch_finishes(const Shape& s, int slots, const TurnFn& turn, const TileFn& tile_of) {
  const int key_tiles = ceil_div(s.seq_k, s.bc), query_tiles = ceil_div(s.seq_q, s.br);
  std::vector<int> count(query_tiles, 0);
  struct Block {
    int key_tile;
    std::vector<int> walk;
    std::size_t next = 0;
  };
  std::vector<Block> resident;
  int started = 0;
  while (started < key_tiles || !resident.empty()) {
    while (static_cast<int>(resident.size()) < slots && started < key_tiles) {
      Block b{tile_of(s, started++, key_tiles), {}};
      for (int i = 0; i < query_tiles; ++i)
        if (sees(s, b.key_tile, i)) b.walk.push_back(i);
      resident.push_back(b);
    }
    bool moved = false;
    for (Block& b : resident)
      while (b.next < b.walk.size() && count[b.walk[b.next]] == turn(s, b.key_tile, key_tiles, b.walk[b.next])) {
        ++count[b.walk[b.next]];
        ++b.next;
        moved = true;
      }
    const auto done = [](const Block& b) { return b.next == b.walk.size(); };
    const bool any_done = std::any_of(resident.begin(), resident.end(), done);
    resident.erase(std::remove_if(resident.begin(), resident.end(), done), resident.end());
    if (!moved && !any_done) return false;  // everyone resident waits for a block not yet started
  }
  for (int i = 0; i < query_tiles; ++i) {
    int seen_by = 0;
    for (int j = 0; j < key_tiles; ++j) seen_by += sees(s, j, i) ? 1 : 0;
    if (count[i] != seen_by) return false;
  }
  return true;
}

std::vector<Shape> shapes() {
  std::vector<Shape> all;
  const std::pair<int, int> lengths[] = {{1, 1},     {77, 1},     {1, 77},     {200, 67},   {67, 200},
                                         {333, 700}, {700, 333},  {1500, 1500}, {4096, 4096}, {16384, 16384}};
  // Query tiles of 64 (rungs 3 to 7), 128 (D = 64 from rung 8 on) and 80 (D = 128 from rung 12 on,
  // the deterministic variant's); key tiles of 128 and 192 (three warpgroups, rungs 6 and 7).
  const std::pair<int, int> tiles[] = {{64, 128}, {64, 192}, {80, 128}, {128, 128}};
  for (const auto& [nq, nk] : lengths)
    for (const auto& [br, bc] : tiles)
      for (const bool causal : {false, true}) all.push_back({nq, nk, br, bc, causal});
  return all;
}

}  // namespace

TEST_CASE("each query tile's key tiles take the turns 0 .. n - 1 once each") {
  for (const Shape& s : shapes()) {
    const int key_tiles = ceil_div(s.seq_k, s.bc), query_tiles = ceil_div(s.seq_q, s.br);
    for (int i = 0; i < query_tiles; ++i) {
      std::vector<int> turns;
      for (int j = 0; j < key_tiles; ++j)
        if (sees(s, j, i)) turns.push_back(course_turn(s, j, key_tiles, i));
      std::sort(turns.begin(), turns.end());
      bool consecutive = true;
      for (std::size_t n = 0; n < turns.size(); ++n) consecutive = consecutive && turns[n] == static_cast<int>(n);
      INFO(s.describe() << ", query tile " << i);
      CHECK(consecutive);
    }
  }
}

TEST_CASE("with the mask the turns follow the arrivals: the key tile that reaches a query tile first goes first") {
  // Every block starts at once; key tile j reaches query tile i at step i − first(j), first(j) the
  // first query tile it sees. A later turn must not arrive earlier.
  for (const Shape& s : shapes()) {
    if (!s.causal) continue;
    const int key_tiles = ceil_div(s.seq_k, s.bc), query_tiles = ceil_div(s.seq_q, s.br);
    for (int i = 0; i < query_tiles; ++i)
      for (int j = 0; j + 1 < key_tiles; ++j) {
        if (!sees(s, j + 1, i)) continue;
        int first_j = 0, first_next = 0;
        while (!sees(s, j, first_j)) ++first_j;
        while (!sees(s, j + 1, first_next)) ++first_next;
        INFO(s.describe() << ", query tile " << i << ", key tiles " << j << " and " << j + 1);
        CHECK(i - first_next <= i - first_j);
        CHECK(course_turn(s, j + 1, key_tiles, i) < course_turn(s, j, key_tiles, i));
      }
  }
}

TEST_CASE("the launch finishes with 1, 2, 7 and 132 blocks resident") {
  for (const Shape& s : shapes())
    for (const int slots : {1, 2, 7, 132}) {
      INFO(s.describe() << ", " << slots << " resident");
      CHECK(launch_finishes(s, slots, course_turn, course_tile));
    }
}

TEST_CASE("the model catches an order that waits for a block not yet started (the check can fail)") {
  // Turns in key-tile order with the masked launch reversed: key tile 0 starts last, and the last
  // key tile, resident first, waits for it.
  const TurnFn by_key_tile = [](const Shape&, int j, int, int) { return j; };
  const Shape s{1500, 1500, 64, 128, true};
  CHECK_FALSE(launch_finishes(s, 1, by_key_tile, course_tile));
  CHECK_FALSE(launch_finishes(s, 7, by_key_tile, course_tile));
  // And the kernel's order with every block resident needs no particular start order.
  CHECK(launch_finishes(s, 1000, course_turn, [](const Shape&, int b, int) { return b; }));
}
