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

#include "07_tensor_cores/tensor_cores.cuh"
#include "09_hopper/hopper.cuh"
#include "fa/cuda/repeat_heads.cuh"

namespace fa::step12 {

bool runs_on_hopper() { return step09::runs_here(); }

void stage07_repeated_heads(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                            DeviceContext& ctx) {
  with_repeated_heads(p, in, out, ctx, step07::attention_forward, "stage 12");
}

void attention_forward_prefill(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                               DeviceContext& ctx) {
  p.require(kSupports);
  // Stage 09 takes grouped heads and packed batches as they are; stage 07 needs K/V repeated.
  if (runs_on_hopper()) step09::attention_forward_overlap(p, in, out, ctx);
  else stage07_repeated_heads(p, in, out, ctx);
}

void attention_forward_prefill_repeated(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                                        DeviceContext& ctx) {
  p.require(kSupports);
  with_repeated_heads(p, in, out, ctx, step09::fastest_forward, "stage 12");
}

}  // namespace fa::step12
