// Stage 08 — the FlashAttention-2 backward on tensor cores, fp16 and bf16 (backward_tc_kernel.cuh;
// docs/08_tensor_core_backward.md). Stage 07's forward writes the O and LSE it starts from.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "fa/cuda/stage_gpu.cuh"
#include "fa/problem.hpp"
#include "fa/tensor.hpp"

namespace fa::bwd {
template <class T>
struct BackwardArgs;  // fa/cuda/backward/key_tiles.cuh
}  // namespace fa::bwd

namespace fa::step08 {

// fp16 or bf16 in and out, float32 accumulators; D = 64 and 128 are the ones tuned.
inline const Supports kSupports{.dtypes = {DType::bfloat16, DType::float16}, .dims = {32, 64, 96, 128, 256}};

struct BackwardOptions {
  // false: dQ by float atomics from the key-tile kernel into a float32 buffer (fastest; the order
  //        of the additions, so dQ's last bits, change from run to run).
  // true:  a second kernel over query tiles computes dQ in registers in a fixed order
  //        (backward_dq_kernel): bitwise-identical dQ on every run and no float32 buffer, for S
  //        and dP computed twice.
  bool deterministic = false;
};

// The stage's backward (bound to its options, a fa::DeviceBackward): device views of contiguous
// [B,H,N,D] tensors of p.dtype (LSE float32), 16-byte aligned; dQ, dK, dV written completely.
// Extra device memory: two floats per query row (D and LSE·log2e, padded to the query tile) and,
// with atomics, a float32 dQ accumulator (B·H·Nq·D), from ctx's scratch.
void attention_backward(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse,
                        ConstTensorView d_o, const AttentionGradients& grads, DeviceContext& ctx,
                        const BackwardOptions& options = {});

// For the ladder (ladder/ladder.cuh): the stage's backward with another key-tile kernel in place of
// its own — the same checks, preprocessing and dQ conversion (atomic dQ), and `launch` (the one of
// p.dtype) where the stage launches backward_tc_kernel.
struct KeyTileLaunch {
  void (*bf16)(const Problem&, const bwd::BackwardArgs<__nv_bfloat16>&, DeviceContext&) = nullptr;
  void (*fp16)(const Problem&, const bwd::BackwardArgs<__half>&, DeviceContext&) = nullptr;
};
void attention_backward_with(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse,
                             ConstTensorView d_o, const AttentionGradients& grads, DeviceContext& ctx,
                             const KeyTileLaunch& launch);

// The forward the backward pairs with: stage 07's.
void attention_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx);

// For the stage's main: one line when this GPU cannot give the kernel its shared memory at p.dim
// (or the forward's), empty otherwise.
std::string device_refusal(const Problem& p);

}  // namespace fa::step08
