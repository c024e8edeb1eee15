// Exercise 04 — the function that flash_forward_exercise.cu defines: stage 04's forward, in fa::ex04.
#pragma once

#include "fa/cuda/stage_gpu.cuh"
#include "fa/problem.hpp"
#include "fa/tensor.hpp"

namespace fa::ex04 {

// Stage 04's forward with your online softmax (fa::DeviceForward shape). Waits for the kernel;
// throws fa::TodoNotDone naming the first hole of the kernel that is still a TODO.
void attention_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                       DeviceContext& ctx);

}  // namespace fa::ex04
