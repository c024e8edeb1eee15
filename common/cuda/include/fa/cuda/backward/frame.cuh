// frame.cuh — the host frame around a key-tile backward kernel with atomic dQ (stages 08 and 10):
// the scratch it needs, the preprocessing before it (D and LSE·log2e per query row, the float32 dQ
// accumulator zeroed) and dQ's conversion after it (row_kernels.cuh). A stage checks its problem,
// calls prepare_backward, launches its key-tile kernel with the arguments it returns, and calls
// finish_atomic_dq. Taught in stage 08 (docs/08_tensor_core_backward.md).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "fa/cuda/backward/key_tiles.cuh"
#include "fa/cuda/backward/row_kernels.cuh"
#include "fa/cuda/check.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/problem.hpp"
#include "fa/tensor.hpp"

namespace fa::bwd {

// Whether all eight tensors of a backward (Q, K, V, O, dO and the three gradients) start 16-byte
// aligned, as the key-tile kernels' 16-byte copies and the TMA's tiles need.
inline bool backward_tensors_aligned16(const AttentionInputs& in, ConstTensorView o, ConstTensorView d_o,
                                       const AttentionGradients& grads) {
  for (const void* ptr : {static_cast<const void*>(in.q.data), static_cast<const void*>(in.k.data),
                          static_cast<const void*>(in.v.data), static_cast<const void*>(d_o.data),
                          static_cast<const void*>(o.data), static_cast<const void*>(grads.dq.data),
                          static_cast<const void*>(grads.dk.data), static_cast<const void*>(grads.dv.data)})
    if (!aligned16(ptr)) return false;
  return true;
}

// The key-tile kernel's arguments, with its scratch taken from ctx (two floats per query row, padded
// to kRowPadding rows per head, and with atomic_dq the float32 dQ accumulator, B·H·Nq·D) and the
// preprocessing queued on ctx.stream. Without atomic_dq, dq_accum is nullptr (a stage that writes dQ
// by another kernel).
template <class T>
BackwardArgs<T> prepare_backward(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse,
                                 ConstTensorView d_o, const AttentionGradients& grads, DeviceContext& ctx,
                                 bool atomic_dq) {
  const std::int64_t heads = p.heads_total();
  const int seq_q_padded = static_cast<int>((p.seq_q + kRowPadding - 1) / kRowPadding * kRowPadding);
  float* dq_accum = atomic_dq ? ctx.scratch_as<float>("dq_accum", static_cast<std::size_t>(p.q_elements())) : nullptr;
  float* lse2 = ctx.scratch_as<float>("lse2", static_cast<std::size_t>(heads * seq_q_padded));
  float* delta = ctx.scratch_as<float>("delta", static_cast<std::size_t>(heads * seq_q_padded));
  const float scale = p.softmax_scale();
  const BackwardArgs<T> args{in.q.as<T>(), in.k.as<T>(),  in.v.as<T>(), d_o.as<T>(),
                             lse2,         delta,         dq_accum,     grads.dk.as<T>(),
                             grads.dv.as<T>(), static_cast<int>(p.seq_q), static_cast<int>(p.seq_k), seq_q_padded,
                             scale,        scale * static_cast<float>(M_LOG2E), p.causal};
  ctx.kernel_begin("preprocess");
  if (atomic_dq)
    FA_CUDA_CHECK(cudaMemsetAsync(dq_accum, 0, static_cast<std::size_t>(p.q_elements()) * sizeof(float), ctx.stream));
  const long long rows = heads * seq_q_padded;
  const bool wide = aligned16(o.data) && aligned16(d_o.data);  // 16-byte rows: D a multiple of 8
  auto launch_wide = [&](auto dim) {
    constexpr int D = decltype(dim)::value;
    preprocess_wide_kernel<T, D><<<static_cast<unsigned>((rows * (D / 8) + 255) / 256), 256, 0, ctx.stream>>>(
        o.as<T>(), args.d_o, lse.as<float>(), lse2, delta, heads, static_cast<int>(p.seq_q), seq_q_padded);
  };
  if (wide && p.dim == 32)
    launch_wide(std::integral_constant<int, 32>{});
  else if (wide && p.dim == 64)
    launch_wide(std::integral_constant<int, 64>{});
  else if (wide && p.dim == 128)
    launch_wide(std::integral_constant<int, 128>{});
  else if (wide && p.dim == 256)
    launch_wide(std::integral_constant<int, 256>{});
  else
    preprocess_kernel<T><<<static_cast<unsigned>((rows * 32 + 255) / 256), 256, 0, ctx.stream>>>(
        o.as<T>(), args.d_o, lse.as<float>(), lse2, delta, heads, static_cast<int>(p.seq_q), seq_q_padded,
        static_cast<int>(p.dim));
  FA_CUDA_CHECK_LAUNCH();
  ctx.kernel_end("preprocess");
  return args;
}

// dQ = τ·(the float32 sum) in the inputs' type, queued on ctx.stream after the key-tile kernel.
template <class T>
void finish_atomic_dq(const Problem& p, const BackwardArgs<T>& args, const AttentionGradients& grads,
                      DeviceContext& ctx) {
  ctx.kernel_begin("dq");
  const long long n = p.q_elements();
  if (n % 4 == 0 && aligned16(args.dq_accum) && aligned16(grads.dq.data)) {
    const unsigned blocks = static_cast<unsigned>(std::min<long long>((n / 4 + 255) / 256, 132LL * 16));
    convert_dq_wide_kernel<T><<<blocks, 256, 0, ctx.stream>>>(reinterpret_cast<const float4*>(args.dq_accum),
                                                              grads.dq.as<T>(), n / 4, args.scale);
  } else {
    const unsigned blocks = static_cast<unsigned>(std::min<long long>((n + 255) / 256, 132LL * 16));
    convert_dq_kernel<T><<<blocks, 256, 0, ctx.stream>>>(args.dq_accum, grads.dq.as<T>(), n, args.scale);
  }
  FA_CUDA_CHECK_LAUNCH();
  ctx.kernel_end("dq");
}

}  // namespace fa::bwd
