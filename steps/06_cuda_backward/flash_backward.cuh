// flash_backward.cuh — stage 06: the backward pass by recomputation, and the materialized backward
// it is measured against. See flash_backward.cu for the kernels and docs/06_cuda_backward.md.
//
// Both backward functions have one shape (fa::DeviceBackward, fa/cuda/stage_gpu.cuh): device
// tensor views in, gradients out. The kernels take the raw float pointers (`as<float>()`, which
// refuses any dtype but float32 and any non-contiguous layout with a UsageError).
//   in.q, in.k, in.v   [B, H, Nq|Nk, D]   the forward's inputs
//   o, lse             [B, H, Nq, D], [B, H, Nq, 1]   all the forward saved
//   d_o                [B, H, Nq, D]      the upstream gradient dL/dO
//   grads.dq/dk/dv     [B, H, Nq|Nk, D]   written completely (every element, masked or not)
// Causal masking is bottom-right aligned (Problem::keys_visible); float32; D ∈ {32, 64, 128};
// Hkv = Hq (no grouped heads).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "fa/backward.hpp"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/problem.hpp"
#include "fa/tensor.hpp"

namespace fa::step06 {

struct BackwardOptions {
  // false: dQ is accumulated with float atomics from the key-tile kernel (fastest; the order of
  //        the additions, so dQ's last bits, change from run to run).
  // true:  a separate dQ kernel over query tiles sums in a fixed order: bitwise-identical dQ on
  //        every run, for about 1.4x the arithmetic (S, P, dP, dS are recomputed a second time).
  bool deterministic = false;
};

// The stage: delta = rowsum(dO ∘ O), then kernels over K/V tiles that recompute S and
// P = exp(S − LSE) tile by tile. Extra device memory: delta, B·H·Nq floats (O(N)).
// With its options bound (a lambda), it is a fa::DeviceBackward: the executable binds
// --deterministic that way (main.cu).
void attention_backward(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse,
                        ConstTensorView d_o, const AttentionGradients& grads, DeviceContext& ctx,
                        const BackwardOptions& options);

// The comparison: S, P (in place), dP and dS (in place) as [B·H, Nq, Nk] float32 scratch in
// device memory (2·B·H·Nq·Nk floats, O(N²)), cuBLAS SGEMMs (FP32 math, no TF32) and two
// elementwise kernels.
void attention_backward_materialized(const Problem& p, const AttentionInputs& in, ConstTensorView o,
                                     ConstTensorView lse, ConstTensorView d_o, const AttentionGradients& grads,
                                     DeviceContext& ctx);

// The forward the backward pairs with: stage 05's (fa::step05::attention_forward), which writes
// only O and LSE and keeps nothing N×N. Here so that one name serves the tests and the executable.
void attention_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                       DeviceContext& ctx);

// The pre-pass alone (for tests): delta[row] = sum_d dO[row, d] · O[row, d], B·H·Nq rows (device
// pointers, float32).
void launch_delta(const Problem& p, const float* o, const float* d_o, float* delta, cudaStream_t stream);

// The device checks for the executable. skip_reason: empty when a GPU of the stage's compute
// capability is there and gives a block the key-tile kernel's shared memory at the smallest D
// (70.5 KiB at D = 32: not Turing's 64 KiB, so the stage skips there, exit 77); otherwise why not.
// device_refusal: empty when the backward runs at p.dim on this GPU (or the stage skips anyway);
// otherwise one line (exit 2: D = 128's 166.5 KiB on sm_86/89's 99 KiB). The backward itself
// throws the same line as a UsageError.
std::string skip_reason();
std::string device_refusal(const Problem& p);

// Tile sizes of the stage kernels (see the picture in flash_backward.cu).
inline constexpr int kBr = 64;       // query rows per tile
inline constexpr int kBc = 64;       // keys per tile
inline constexpr int kThreads = 256;

}  // namespace fa::step06
