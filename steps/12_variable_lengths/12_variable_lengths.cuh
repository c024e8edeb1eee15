// Stage 12 — prefill as a server runs it: grouped-query heads (each K/V head read by the G query
// heads of its group, not copied G times) and packed batches of prompts of different lengths
// ([1, H, Σ L_s, D], sequence s at rows cu_seqlens[s] .., fa/packed.hpp; no padding computed), both
// run by stage 09's kernel (12_variable_lengths.cu; docs/12_variable_lengths.md).
//
// What changed from stage 09: nothing in the kernel's loop. Stage 09's kernel takes the K/V head of
// a query head and the rows of a block's sequence from policies that this stage passes in
// (fa/cuda/policies/); this stage builds them from the problem and launches.
#pragma once

#include <string>

#include "fa/cuda/stage_gpu.cuh"
#include "fa/problem.hpp"
#include "fa/tensor.hpp"

namespace fa::step12 {

// fp16 or bf16 (float32 accumulators and LSE); stage 09's head dims; grouped heads (Hq a multiple
// of Hkv, Hkv = 1 is multi-query); packed variable-length batches (--seq-lens, or --load with
// cu_seqlens.txt), each sequence causal within itself.
inline const Supports kSupports{.dtypes = {DType::bfloat16, DType::float16},
                                .dims = {64, 128, 256},
                                .grouped_heads = true,
                                .variable_lengths = true};

// Prefill with grouped heads, packed or not (fa::DeviceForward): on compute capability 9.0 stage
// 09's overlap rung with the grouped-heads policy (query head bh reads K/V head bh / G) and, packed,
// the packed-rows policy (a block per query tile of each sequence: grid z the sequence); elsewhere
// stage 07 on K/V repeated to Hq (stage07_repeated_heads), which refuses packed batches.
void attention_forward_prefill(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                               DeviceContext& ctx);
// The same kernel on the multi-head problem of the same query shape: K and V repeated to Hq heads
// first (its own kernel, timed apart as "repeat K/V" in the results' split_ms), then the forward
// with Hkv = Hq. Its forward's time is the multi-head time that grouped prefill is measured against.
void attention_forward_prefill_repeated(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                                        DeviceContext& ctx);

// The previous stage on the same problem, as the course's forward without grouped heads runs it:
// K and V repeated to Hq heads (scratch, counted), then stage 07's forward. Its time includes the
// repeat.
void stage07_repeated_heads(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                            DeviceContext& ctx);

// Whether prefill runs on stage 09's kernel on the current GPU (compute capability 9.0).
bool runs_on_hopper();

}  // namespace fa::step12
