// Exercise 01 — the functions that attention_exercise.cpp defines: stage 01's, in fa::ex01.
#pragma once

#include <cstdint>

#include "fa/memory.hpp"
#include "fa/problem.hpp"
#include "fa/tensor.hpp"

namespace fa::ex01 {

// The forward of every host stage (fa::HostForward): reads Q, K, V, writes O and LSE; S and P
// ([Nq, Nk] each) are allocated on `workspace`, which measures them.
void attention_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                       MemoryMeter& workspace);

// One head with its intermediates: S and P into the caller's [Nq, Nk] buffers, O [Nq, D] and
// LSE [Nq]. The checks look at S and P through it, one hole at a time.
void attention_head(const Problem& p, ConstMapRM Q, ConstMapRM K, ConstMapRM V, MapRM S, MapRM P,
                    MapRM O, float* lse);

}  // namespace fa::ex01
