// Stage 05 — causal attention that skips the K/V tiles above the diagonal and masks only the
// diagonal ones. The kernel is stage 04's with new loop bounds (flash_causal_kernel.cuh); without
// --causal it is stage 04. Stage 06 runs this forward before its backward.
#pragma once

#include <cstdint>

#include "fa/cuda/stage_gpu.cuh"
#include "fa/problem.hpp"
#include "fa/tensor.hpp"

namespace fa::step05 {

struct CausalOptions {
  bool heavy_first = true;   // start the Q tiles with the most key tiles first (reversed grid order)
  bool count_tiles = false;  // test mode: count K/V tiles loaded and masked on the device
};

// The stage's forward (fa::DeviceForward shape): D = 32, 64, 128; other D → UsageError. Heaviest
// Q tiles first. When run from the stage executable, --count-tiles sets count_tiles; with
// count_tiles, ctx.counters gets "kv_tiles_loaded" and "kv_tiles_masked" (measured on the device)
// and "kv_tiles_dense" (what stage 04 loads: every tile), and a 16-byte counter buffer is
// allocated on ctx's meter.
void attention_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                       DeviceContext& ctx);
void attention_forward_with(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                            DeviceContext& ctx, const CausalOptions& options);

// The tiles this stage loads and masks, counted on the host with the kernel's formula (for the
// executable's report; the tests count them independently, pair by pair).
struct TileCounts {
  std::int64_t loaded = 0, masked = 0, dense = 0;
};
TileCounts count_tiles(const Problem& p);

}  // namespace fa::step05
