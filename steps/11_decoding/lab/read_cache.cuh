// read_cache.cuh — not attention: what reading the cache alone costs on this GPU, measured. The floor
// that stage 11's decoding step, which reads the same bytes and does more, is measured against
// (docs/11_decoding.md, "The floor, measured"). It measures; the lesson is decode_kernel.cuh.
#pragma once

#include "fa/cuda/stage_gpu.cuh"
#include "fa/problem.hpp"
#include "fa/tensor.hpp"

namespace fa::step11 {

// K and V ([B, Hkv, Nk, D], all of it) read once by a plain streaming kernel (one wave of as many
// blocks as fit, eight 16-byte loads in flight per thread), nothing computed; O written as zeros, LSE
// as −inf. step11_decoding times it beside the split kernels (variant read_cache, not verified).
void read_cache_only(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx);
// The same, and with overlap_previous in a stream of steps: the kernel may start before the one ahead
// of it ends, reading the cache at once and writing O and LSE after it (step11_stream).
void read_cache(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx,
                bool overlap_previous);

}  // namespace fa::step11
