// Stage 10 — the backward on Hopper's instructions: all five products of stage 08's backward on
// wgmma, Q, dO and the rows' LSE and D by TMA (hopper_backward.cu; the ladder's rungs in ladder/).
// Stage 09's forward writes the O and LSE it starts from; stage 08 stays the backward for GPUs
// before Hopper.
#pragma once

#include <string>

#include "fa/cuda/stage_gpu.cuh"
#include "fa/problem.hpp"
#include "fa/tensor.hpp"

namespace fa::step10 {

// fp16 or bf16 in and out, float32 accumulators; D = 64 and 128 (the ladder), 256 (the stage's
// kernel only: split_columns.cuh); grouped-query heads (Hq a multiple of Hkv: dK and dV summed over
// each group).
inline const Supports kSupports{.dtypes = {DType::bfloat16, DType::float16}, .dims = {64, 128, 256},
                                .grouped_heads = true};

// The stage's backward (a fa::DeviceBackward): device views of contiguous [B,H,N,D] tensors of
// p.dtype (LSE float32), 16-byte aligned, K, V, dK, dV with Hkv heads; dQ, dK, dV written
// completely. Causal: the bottom-right mask, query tiles above the diagonal skipped. Needs compute
// capability 9.0 (the build is sm_90a). Extra device memory, as stage 08's: two floats per query row (D and
// LSE·log2e, padded to 640 rows) and the float32 dQ accumulator (B·H·Nq·D), from ctx's scratch.
// Queued on ctx.stream.
void attention_backward(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse,
                        ConstTensorView d_o, const AttentionGradients& grads, DeviceContext& ctx);

// The rungs of the ladder (ladder/), each launched the stage's way: rung 1, all five products on
// wgmma with Q and dO by TMA; rung 2, each query tile's LSE·log2e and D brought into shared memory
// beside them; rung 3, dQ added into global memory by the TMA from shared memory instead of by the
// warps' atomics, and grouped heads (rungs 1 and 2 refuse them); rung 4, each warpgroup through the
// query tiles on its own (its own dQ over its keys, no block barrier in the loop; slower at
// D = 128, not built on); rung 5, rung 3 with dS stored by stmatrix; rung 6,
// rung 5 with three warpgroups at D = 64 (at D = 128 it is rung 5); rung 7, rung 6 with each
// warpgroup's own barrier after dS's stores at D = 64; rung 8, rung 5 with query tiles of 128 and
// two warpgroups at D = 64 (rung 6 at D = 128); rung 9, rung 8 with one MUFU.EX2 per exponential;
// rung 10, rung 9 with dQ's products issued before dK's; rung 11, rung 10 with dV's products
// issued before dS is computed; rung 12, rung 10 with query tiles of 80 and dQ computed
// transposed at D = 128 (rung 10 at D = 64); rung 13, rung 12 with the blocks that see the most
// queries started first under the causal mask (block_order.hpp); rung 14, the stage's kernel, rung 13
// with the last wave's key tiles split into pieces without the mask (tail_split.hpp).
// deterministic: rung 13's kernel with dQ's additions in a fixed order (dq_turns.hpp) and the
// blocks in index order: bitwise the same dQ on every run; extra device memory, one int per query
// head and query tile. At D = 256 only the stage's kernel runs (split_columns.cuh).
enum class Rung { wgmma, rows_in_shared, dq_by_tma, deterministic, own_dq, ds_by_stmatrix, three_groups,
                  group_barrier, wide_query_tiles, fast_exp, dq_before_dk, dv_early, tiles_of_80,
                  heavy_first, split_tail };
// The rung attention_backward runs at D = 64 and 128.
inline constexpr Rung kStageRung = Rung::split_tail;
void attention_backward_rung(Rung rung, const Problem& p, const AttentionInputs& in, ConstTensorView o,
                             ConstTensorView lse, ConstTensorView d_o, const AttentionGradients& grads,
                             DeviceContext& ctx);

// The course's fastest backward on the current device, as a later stage runs it (stage 13's ring):
// this stage's where it runs (compute capability 9.0, D = 64, 128 or 256), stage 08 elsewhere
// (with its default options); and which one that is ("10" or "08").
void fastest_backward(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse,
                      ConstTensorView d_o, const AttentionGradients& grads, DeviceContext& ctx);
const char* fastest_backward_stage(const Problem& p);

// The forward the backward pairs with: stage 09's (its overlap rung).
void attention_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx);

// Empty on a GPU of compute capability 9.0, else the one line of why (stage 09's).
std::string skip_reason();

// For tests: rung 14 plans its split for this many resident blocks instead of the device's (0: the
// device's), so that small shapes are split too.
void set_tail_slots_for_testing(int slots);

}  // namespace fa::step10
