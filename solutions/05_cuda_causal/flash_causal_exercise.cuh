// Exercise 05 — the function that flash_causal_exercise.cu defines: stage 05's forward, in fa::ex05.
#pragma once

#include "fa/cuda/stage_gpu.cuh"
#include "fa/problem.hpp"
#include "fa/tensor.hpp"

namespace fa::ex05 {

// Stage 05's forward with your loop bounds and mask. With `tile_counters` (a device array of two
// zeroed unsigned long long) the kernel counts the K/V tiles it loads ([0]) and masks ([1]).
// Waits for the kernel; throws fa::TodoNotDone naming the first hole that is still a TODO.
void attention_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                       DeviceContext& ctx, unsigned long long* tile_counters = nullptr);

}  // namespace fa::ex05
