// masked_tiles.hpp — for the stage's CPU tests (test_dq_turns.cpp, test_block_order.cpp): which
// key tile sees which query tile under the bottom-right mask, found element by element, not by the
// kernel's formula.
#pragma once

#include <algorithm>

namespace fa::step10::testing {

inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Does key tile j (bc keys) see query tile i (br queries): some key of it at most some query of
// it + Nk − Nq? The smallest key against the largest query decides.
inline bool key_tile_sees(int j, int i, int seq_q, int seq_k, int br, int bc) {
  const int first_key = j * bc, last_query = std::min((i + 1) * br, seq_q) - 1;
  return first_key <= last_query + seq_k - seq_q;
}

}  // namespace fa::step10::testing
