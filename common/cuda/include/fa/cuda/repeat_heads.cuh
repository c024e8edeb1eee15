// repeat_heads.cuh — grouped-query heads made multi-head: K and V [B, Hkv, N, D] copied to
// [B, Hq, N, D], each K/V head to the G = Hq/Hkv query heads that read it. What a stage that knows
// no grouped heads needs before it can run a grouped problem (stage 11's and stage 12's comparison
// with stage 07), and the multi-head problem that grouped prefill is measured against (stage 12).
// Packed batches ([1, H, Σ L_s, D], fa/packed.hpp) are repeated the same way, a head's rows being
// every sequence's.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <string>

#include "fa/cuda/check.cuh"
#include "fa/cuda/dtype.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/tensor.hpp"

namespace fa {

// 16 bytes per thread, a grid-stride loop. A template (of nothing the caller chooses) so that every
// translation unit that includes this header may instantiate it.
template <class Chunk = int4>
__global__ void repeat_heads_kernel(const Chunk* from, Chunk* to, long long chunks_per_head, int group,
                                    long long total_chunks) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total_chunks;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long head = i / chunks_per_head, within = i % chunks_per_head;
    to[i] = from[head / group * chunks_per_head + within];
  }
}

// K and V repeated to Hq heads (two scratch buffers of ctx, counted on its meter; timed as
// "repeat K/V" in the results' split_ms), then `forward` on that multi-head problem. With Hkv = Hq,
// `forward` on the inputs as they are. `who` names the caller in the one line of a refusal.
inline void with_repeated_heads(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                                DeviceContext& ctx, const DeviceForward& forward, const std::string& who) {
  if (p.kv_heads() == p.heads) return forward(p, in, out, ctx);
  Problem mha = p;
  mha.heads_kv = 0;
  const std::size_t bytes = static_cast<std::size_t>(mha.kv_elements()) * size_of(p.dtype);
  // A head's rows: Nk, or packed every sequence's (Σ L_s), in one batch entry.
  const long long rows = p.packed() ? p.total_tokens() : p.seq_k, batch = p.packed() ? 1 : p.batch;
  const long long head_bytes = rows * p.dim * static_cast<long long>(size_of(p.dtype));
  if (head_bytes % 16 != 0) throw UsageError(who + ", K/V repeated to Hq heads: a head's K/V must be a multiple of 16 bytes");
  const long long chunks_per_head = head_bytes / 16, total = batch * mha.heads * chunks_per_head;
  auto repeat = [&](ConstTensorView from, const char* name) {
    void* to = ctx.scratch(name, bytes);
    const unsigned blocks = static_cast<unsigned>(std::min<long long>((total + 255) / 256, 65535));
    repeat_heads_kernel<<<blocks, 256, 0, ctx.stream>>>(static_cast<const int4*>(from.data), static_cast<int4*>(to),
                                                         chunks_per_head, static_cast<int>(p.heads / p.kv_heads()),
                                                         total);
    FA_CUDA_CHECK_LAUNCH();
    return ConstTensorView{to, p.dtype, kv_shape(mha)};
  };
  ctx.kernel_begin("repeat K/V");
  const AttentionInputs repeated{in.q, repeat(in.k, "K repeated to Hq heads"), repeat(in.v, "V repeated to Hq heads")};
  ctx.kernel_end("repeat K/V");
  forward(mha, repeated, out, ctx);
}

}  // namespace fa
