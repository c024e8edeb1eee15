// naive_attention.cuh — stage 03: attention as three CUDA kernels, S and P in device memory.
//
// The interface of stage 03 (stages 04–06 test and benchmark against it). Both functions have the
// common fa::DeviceForward shape: device pointers in, device pointers out, scratch and timing
// through the DeviceContext.
//
//   S = scale · Q Kᵀ        [B, H, Nq, Nk]   kernel "qk"       (scratch "S", float32)
//   P = softmax_row(S)      [B, H, Nq, Nk]   kernel "softmax"  (scratch "P", float32; also writes LSE)
//   O = P V                 [B, H, Nq, D]    kernel "pv"
//
// Causal masking is bottom-right aligned (query i sees key j iff j < Problem::keys_visible(i));
// a row that sees no key gets P = 0, O = 0 and LSE = −inf. float32 only.
#pragma once

#include <cuda_runtime.h>

#include "fa/cuda/stage_gpu.cuh"
#include "fa/problem.hpp"
#include "fa/tensor.hpp"

namespace fa::step03 {

// Three hand-written kernels: tiled QKᵀ, row softmax, tiled PV.
void attention_forward_naive(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                             DeviceContext& ctx);

// What a practitioner writes: cublasSgemmStridedBatched for QKᵀ and PV (FP32 math, no TF32) around
// the same softmax kernel.
void attention_forward_cublas(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                              DeviceContext& ctx);

// The three steps one by one, for tests and the exercise. All pointers are device pointers;
// s and pr are [B·H, Nq, Nk] float32.
void launch_qk(const Problem& p, const float* q, const float* k, float* s, cudaStream_t stream);
void launch_softmax(const Problem& p, const float* s, float* pr, float* lse, cudaStream_t stream);
void launch_pv(const Problem& p, const float* pr, const float* v, float* o, cudaStream_t stream);

}  // namespace fa::step03
