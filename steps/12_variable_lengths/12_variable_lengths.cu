// Stage 12 — the host side: which kernel a prefill runs on this GPU, and the comparisons beside it
// (the same kernel on K/V repeated to Hq heads; stage 07 on K/V repeated).
//
// What changed from stage 09 (steps/09_hopper/hopper.cu): no kernel of its own. On compute
// capability 9.0 prefill is stage 09's overlap rung launched with this stage's policies: the
// grouped heads (the K/V tensor maps over B·Hkv heads, query head bh reading K/V head bh / G) and,
// for a packed batch, the packed rows (a block per query tile of each sequence, grid z the
// sequence, its rows found through cu_seqlens). Elsewhere stage 07 on repeated heads.
//
// Build and run (verifies against float64, each sequence of a packed batch alone, and stage 07):
//   cmake -S . -B build -G Ninja && cmake --build build --target step12_variable_lengths
//   build/steps/12_variable_lengths/step12_variable_lengths        (--help for the flags)
#include "12_variable_lengths/12_variable_lengths.cuh"

#include <climits>
#include <cstdint>
#include <vector>

#include "07_tensor_cores/tensor_cores.cuh"
#include "09_hopper/hopper.cuh"
#include "fa/cuda/check.cuh"
#include "fa/cuda/policies/heads.cuh"
#include "fa/cuda/policies/rows.cuh"
#include "fa/cuda/repeat_heads.cuh"

namespace fa::step12 {

bool runs_on_hopper() { return step09::runs_here(); }

void stage07_repeated_heads(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                            DeviceContext& ctx) {
  with_repeated_heads(p, in, out, ctx, step07::attention_forward, "stage 12");
}

namespace {

// A packed batch's offsets on the device, as the packed-rows policy reads them: B + 1 ints in ctx's
// scratch (counted on its meter), copied on ctx's stream before the kernel that reads them.
const int* device_cu_seqlens(const Problem& p, DeviceContext& ctx) {
  if (p.total_tokens() > INT_MAX / 2) throw UsageError("stage 12: Σ L_s is too large for 32-bit indices");
  const std::vector<std::int64_t> cu = p.cu_seqlens();
  const std::vector<int> cu32(cu.begin(), cu.end());
  int* device_cu = ctx.scratch_as<int>("cu_seqlens", cu32.size());
  FA_CUDA_CHECK(cudaMemcpyAsync(device_cu, cu32.data(), cu32.size() * sizeof(int), cudaMemcpyHostToDevice, ctx.stream));
  return device_cu;
}

}  // namespace

void attention_forward_prefill(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                               DeviceContext& ctx) {
  p.require(kSupports);
  if (!runs_on_hopper()) return stage07_repeated_heads(p, in, out, ctx);  // stage 07 needs K/V repeated
  // Stage 09's overlap rung with this stage's policies: each query head reads K/V head bh / G, and
  // a packed batch's blocks find their sequence's rows through cu_seqlens.
  const policies::GroupedHeads heads{static_cast<int>(p.heads / p.kv_heads())};
  if (p.packed())
    step09::attention_forward_overlap_with(p, in, out, ctx, heads, policies::PackedRows{device_cu_seqlens(p, ctx)});
  else
    step09::attention_forward_overlap_with(p, in, out, ctx, heads, policies::DenseRows{});
}

void attention_forward_prefill_repeated(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                                        DeviceContext& ctx) {
  p.require(kSupports);
  with_repeated_heads(p, in, out, ctx, step09::fastest_forward, "stage 12");
}

}  // namespace fa::step12
