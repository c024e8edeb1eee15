// Stage 05 — causal attention that skips the K/V tiles above the diagonal and masks only the
// diagonal ones. The kernel is stage 04's with new loop bounds (flash_causal_kernel.cuh); without
// --causal it is stage 04. Stage 06 runs this forward before its backward.
#pragma once

#include <cstdint>

#include "fa/cuda/stage_gpu.cuh"
#include "fa/problem.hpp"
#include "fa/tensor.hpp"

namespace fa::step05 {

// The stage's forward (fa::DeviceForward shape): stage 04's checks (float32, D = 32, 64, 128);
// the heaviest Q tiles first.
void attention_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                       DeviceContext& ctx);
// The same with the tile order chosen: heavy_first = false keeps the natural order (the
// measurement of what the order is worth, docs/05_cuda_causal.md).
void attention_forward_ordered(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                               DeviceContext& ctx, bool heavy_first);

// The K/V tiles this stage loads and masks, counted on the host with the kernel's bounds (the
// header of flash_causal_kernel.cuh): for the executable's report, and for the tests, which count
// them independently, pair by pair.
struct TileCounts {
  std::int64_t loaded = 0, masked = 0, dense = 0;
};
TileCounts count_tiles(const Problem& p);

}  // namespace fa::step05
