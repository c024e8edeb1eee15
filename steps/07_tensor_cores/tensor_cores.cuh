// Stage 07 — FlashAttention-2's forward on tensor cores, fp16 and bf16 (flash_tc_kernel.cuh; the
// ladder that builds it up: ladder/ladder.cuh; docs/07_tensor_cores.md).
#pragma once

#include <string>

#include "fa/cuda/stage_gpu.cuh"
#include "fa/problem.hpp"
#include "fa/tensor.hpp"

namespace fa::step07 {

// fp16 or bf16 inputs and output (float32 accumulators, float32 LSE); D = 64 and 128 are the fast
// ones, 32, 96 and 256 run correctly (compiled in: the D loops are unrolled).
inline const Supports kSupports{.dtypes = {DType::bfloat16, DType::float16}, .dims = {32, 64, 96, 128, 256}};

// The stage's forward (fa::DeviceForward): device views of contiguous [B,H,N,D] tensors of
// p.dtype, 16-byte aligned; O and LSE written, nothing allocated. Causal: the bottom-right mask,
// tiles above the diagonal skipped, the heaviest Q tiles first. Queued on ctx.stream.
void attention_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx);

// The same in the natural tile order (heavy_first = false): what the order is worth, measured.
void attention_forward_in_order(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                                DeviceContext& ctx);

// For a stage's main, before the run: the one line of a refusal when this GPU cannot run the
// kernel at p.dim (its shared memory), empty otherwise (and without a suitable GPU).
std::string device_refusal(const Problem& p);

}  // namespace fa::step07
