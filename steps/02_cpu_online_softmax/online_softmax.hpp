// Stage 02 — the online softmax: attention in tiles over K/V, on the CPU. See online_softmax.cpp.
#pragma once

#include <cstdint>

#include "fa/memory.hpp"
#include "fa/problem.hpp"
#include "fa/tensor.hpp"

namespace fa::step02 {

// The tile: Br query rows against Bc keys. 64 x 64 floats are 16 KiB, a tile that stays in the
// CPU's L1/L2 cache as it would in a GPU's shared memory.
inline constexpr std::int64_t kBr = 64;
inline constexpr std::int64_t kBc = 64;

// The stage's forward, the signature every host stage shares (fa::HostForward). Its workspace is
// one Br x Bc score tile and m, l for the Nq rows of a head, allocated on `workspace`: O(N).
void attention_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                       MemoryMeter& workspace);

// The online softmax of one tile, also run alone by the tests: folds the scores S of query rows
// i0 .. i0 + S.rows() − 1 against keys j0 .. j0 + S.cols() − 1 into those rows' running max m,
// running sum l and unnormalised output Õ_i (rescaled). On return S holds P̃ = exp(S − m_new),
// 0 where the causal mask hides a key, ready for Õ_i += P̃ V_j.
void online_softmax_update(const Problem& p, std::int64_t i0, std::int64_t j0, MapRM S, float* m,
                           float* l, MapRM O_i);

// How many tiles online_softmax_update has folded since it was last set to 0. The work a causal
// forward skips is invisible in its results (a tile hidden from every row adds P̃ = 0), so the
// checks of exercise ex02 count it here. One increment per tile of 64 x 64 scores: free.
inline std::int64_t tiles_folded = 0;

}  // namespace fa::step02
