// test_tail_split.cpp — rung 14's split of the last wave (tail_split.hpp), on the CPU: at the
// paper's shapes on 132 SMs the plan splits the last wave's tiles (4 at D = 64, 68 at D = 128) and
// its model ends sooner; whole waves are left alone; the pieces of every split tile cover each of
// its steps exactly once, every block of the launch is a whole tile, a piece or padding, and every
// tile is walked; and a launch model, independent of the plan's own formula (each block started on
// the first SM free), ends as soon as the plan says.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <queue>
#include <vector>

#include "../tail_split.hpp"

namespace {

using fa::step10::TailSplit;

constexpr int kSms = 132;
constexpr double kCost = 1.0;

// The end of a launch of `split` for `tiles` tiles of `steps` steps on `slots` SMs, each block
// started in index order on the SM that frees first; a whole tile takes steps + cost, a piece its
// steps + cost, padding nothing.
double modelled_end(const TailSplit& split, int steps, int slots, double cost) {
  std::priority_queue<double, std::vector<double>, std::greater<>> free_at;
  for (int s = 0; s < slots; ++s) free_at.push(0.0);
  double end = 0.0;
  for (long long b = 0; b < fa::step10::split_blocks(split); ++b) {
    const fa::step10::BlockPiece piece = fa::step10::block_piece(b, split);
    const int first = fa::step10::piece_first_step(steps, piece.part, piece.pieces);
    const int mine = fa::step10::piece_first_step(steps, piece.part + 1, piece.pieces) - first;
    const double start = free_at.top();
    free_at.pop();
    free_at.push(start + mine + cost);
    end = std::max(end, start + mine + cost);
  }
  return end;
}

}  // namespace

TEST_CASE("the paper's shapes on 132 SMs: the last wave split, and the launch ends sooner") {
  struct Shape {
    const char* name;
    long long tiles;
    int steps;
    long long split_tiles;
  };
  // D = 64: 4096 blocks, walks of 32 (4k) to 128 (16k) query tiles of 128; D = 128: 2048 blocks,
  // walks of 52 to 205 query tiles of 80. The last wave: 4 and 68 tiles.
  for (const Shape& s : {Shape{"D = 64, 4k", 4096, 32, 4}, Shape{"D = 64, 16k", 4096, 128, 4},
                         Shape{"D = 128, 4k", 2048, 52, 68}, Shape{"D = 128, 16k", 2048, 205, 68}}) {
    CAPTURE(s.name);
    const TailSplit split = fa::step10::plan_tail_split(s.tiles, kSms, s.steps, kCost);
    CHECK(split.split_tiles == s.split_tiles);
    CHECK(split.pieces >= 2);
    CHECK(split.whole_blocks + split.split_tiles == s.tiles);
    const double before = modelled_end(TailSplit{s.tiles, 0, 1}, s.steps, kSms, kCost);
    const double after = modelled_end(split, s.steps, kSms, kCost);
    CHECK(before == doctest::Approx((s.tiles + kSms - 1) / kSms * (s.steps + kCost)));
    CHECK(after < 0.985 * before);  // at least 1.5 % sooner, in the model
  }
  // D = 64, 4k, exactly: the 4 tiles in 32 pieces of one step, one round on 128 SMs.
  const TailSplit d64 = fa::step10::plan_tail_split(4096, kSms, 32, kCost);
  CHECK(d64.pieces == 32);
  CHECK(modelled_end(d64, 32, kSms, kCost) == doctest::Approx(31 * 33.0 + 2.0));
}

TEST_CASE("nothing split where it would not end sooner") {
  // Nothing split, as the launch passes it with the mask: every block owns its own tile.
  for (const long long b : {0LL, 5LL, 100000LL}) {
    const fa::step10::BlockPiece piece = fa::step10::block_piece(b, TailSplit{});
    CHECK((piece.tile == b && piece.part == 0 && piece.pieces == 1 && !piece.idle));
  }
  CHECK(fa::step10::plan_tail_split(2 * kSms, kSms, 52, kCost).split_tiles == 0);  // whole waves
  CHECK(fa::step10::plan_tail_split(4096, kSms, 1, kCost).split_tiles == 0);       // one step: nothing to share
  CHECK(fa::step10::plan_tail_split(0, kSms, 52, kCost).split_tiles == 0);
  // A last wave of 131 tiles of 2 steps: pieces of one step would need two rounds.
  CHECK(fa::step10::plan_tail_split(kSms + 131, kSms, 2, kCost).split_tiles == 0);
}

TEST_CASE("pieces cover every step of every tile once; every block is a tile, a piece or padding") {
  for (const long long tiles : {36LL, 100LL, 4096LL, 2048LL})
    for (const int slots : {5, 10, 14, 132})
      for (const int steps : {2, 6, 10, 52}) {
        const TailSplit split = fa::step10::plan_tail_split(tiles, slots, steps, kCost);
        CAPTURE(tiles);
        CAPTURE(slots);
        CAPTURE(steps);
        std::vector<std::vector<int>> walked(static_cast<std::size_t>(tiles), std::vector<int>(steps, 0));
        // The launch's grid: a block per tile where nothing is split; else rows of `key_tiles`
        // blocks (here 6) with padding after the last piece.
        const long long key_tiles = 6, rows = (fa::step10::split_blocks(split) + key_tiles - 1) / key_tiles;
        const long long blocks = split.split_tiles > 0 ? rows * key_tiles : tiles;
        long long idle = 0;
        for (long long b = 0; b < blocks; ++b) {
          const fa::step10::BlockPiece piece = fa::step10::block_piece(b, split);
          if (piece.idle) {
            ++idle;
            continue;
          }
          REQUIRE(piece.tile >= 0);
          REQUIRE(piece.tile < tiles);
          CHECK((piece.pieces == 1) == (piece.tile < split.whole_blocks));
          for (int m = fa::step10::piece_first_step(steps, piece.part, piece.pieces);
               m < fa::step10::piece_first_step(steps, piece.part + 1, piece.pieces); ++m)
            ++walked[static_cast<std::size_t>(piece.tile)][static_cast<std::size_t>(m)];
        }
        CHECK(idle == blocks - fa::step10::split_blocks(split));
        bool once = true;
        for (const auto& tile : walked) once = once && std::all_of(tile.begin(), tile.end(), [](int n) { return n == 1; });
        CHECK(once);
        // Wherever the plan splits, the launch model ends sooner too.
        if (split.split_tiles > 0)
          CHECK(modelled_end(split, steps, slots, kCost) <
                modelled_end(TailSplit{tiles, 0, 1}, steps, slots, kCost));
      }
}
