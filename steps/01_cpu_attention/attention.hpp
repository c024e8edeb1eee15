// Stage 01 — attention as written in the paper, on the CPU with Eigen. See attention.cpp.
#pragma once

#include <cstdint>

#include "fa/memory.hpp"
#include "fa/problem.hpp"
#include "fa/tensor.hpp"

namespace fa::step01 {

// The stage's forward, the signature every host stage shares (fa::HostForward): reads Q, K, V,
// writes O and LSE. Its workspace (S and P, [Nq, Nk] each) is allocated on `workspace`, which
// measures it.
void attention_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                       MemoryMeter& workspace);

// One head with its intermediates: S = scale·Q·Kᵀ and P = softmax(S) go to the caller's
// [Nq, Nk] buffers, O and LSE to the caller's [Nq, D] and [Nq]. The tests look at P through it,
// and a GPU stage that materializes S and P can check its intermediates against it.
void attention_head(const Problem& p, ConstMapRM Q, ConstMapRM K, ConstMapRM V, MapRM S, MapRM P,
                    MapRM O, float* lse);

}  // namespace fa::step01
