// Stage 02 — the online softmax: attention in tiles over K/V, on the CPU with Eigen.
//
// Stage 01 materialized S and P, [Nq, Nk] each. Here S only ever exists as one tile: Br query
// rows Q_i against Bc keys K_j. Each query row carries a running max m, a running sum l and an
// unnormalised output Õ, and each tile of keys is folded in:
//
//   S_i^(j) = τ · Q_i K_jᵀ                                       [Br, Bc]
//   m_i^(j) = max(m_i^(j−1), rowmax S_i^(j))                     m^(0) = −inf
//   P̃_i^(j) = exp(S_i^(j) − m_i^(j))                             [Br, Bc], entries ≤ 1
//   l_i^(j) = exp(m_i^(j−1) − m_i^(j)) · l_i^(j−1) + rowsum P̃_i^(j)       l^(0) = 0
//   Õ_i^(j) = diag(exp(m_i^(j−1) − m_i^(j))) · Õ_i^(j−1) + P̃_i^(j) V_j     Õ^(0) = 0
//
// and once, after the last tile: O_i = diag(l_i)⁻¹ Õ_i and LSE_i = m_i + log l_i.
// Why it is exact: after tile j, l and Õ are stage 01's sums Σ_k exp(S_k − m) and
// Σ_k exp(S_k − m)·v_k over the keys seen so far, taken with m = the max of those keys. When a
// tile raises the max, multiplying by exp(m_old − m_new) moves every term already summed onto the
// new max. After the last tile m is the row max, and O and LSE are stage 01's, up to rounding.
//
// The loops run in the order of FlashAttention's Algorithm 1 (Dao et al. 2022): the outer loop
// walks the K/V tiles, the inner loop the Q tiles. Each K_j, V_j is read once and meets every
// Q_i, so every row's m and l must be kept from one K/V tile to the next: 2·Nq floats per head.
// Memory: one Br x Bc score tile (its scores, then its P̃ in place) and m, l for the Nq rows of
// a head: (Br·Bc + 2·Nq)·4 bytes, 16 KiB + 8 bytes per query row. The memory chart shows it
// growing as N beside stage 01's N². (Stage 04 swaps the loops, as FlashAttention-2 does: a Q
// tile then stays on chip for all of K/V, and its m and l live in registers.)
// Õ accumulates in the output rows themselves.
// Causal: a (Q_i, K_j) pair of tiles that no row of Q_i sees is skipped (the tile's last row sees
// the most keys); within a tile, keys past a row's limit get P̃ = 0. A row that sees no key keeps
// m = −inf, l = 0, Õ = 0 and ends with O = 0, LSE = −inf.
//
// Build and run (the default sweep verifies against stage 01 and charts both):
//   cmake -S . -B build && cmake --build build --target step02_cpu_online_softmax
//   build/steps/02_cpu_online_softmax/step02_cpu_online_softmax      (--help for the flags)
//
// What changed from stage 01 (diff steps/01_cpu_attention/attention.cpp against this file):
// S and P [Nq, Nk] became one [Br, Bc] tile; the row max and row sum are built up tile by tile
// (kept for every row: m and l, [Nq] each), rescaling what was summed before; the division by l
// moved to the very end, once per row.
//
// Known limits, on purpose:
// - One CPU thread. Measured, it runs at about stage 01's speed (the small 64 x 64 x D products
//   cost Eigen a little, the tiles staying in cache gives it back); the point of this stage is
//   the memory, and speed is the subject of the GPU stages.
// - A causal tile on the diagonal still computes the scores it then masks (as the GPU stages do).
// - The tile buffers are full size even when N < 64.
#include "online_softmax.hpp"

// The online-softmax update and the tiled loop (the hole of exercise ex02): angle brackets on
// purpose, the exercise builds this file with its own folder first on the include path.
#include <tiled_attention.hpp>
