// Stage 09 — the forward on Hopper's instructions: TMA for the tiles, wgmma for both products,
// warp specialization and FlashAttention-3's two schedules, one rung each (hopper.cu;
// docs/09_hopper.md).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "fa/cuda/device.cuh"
#include "fa/cuda/policies/heads.cuh"
#include "fa/cuda/policies/rows.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/problem.hpp"
#include "fa/tensor.hpp"

namespace fa::step09 {

// fp16 or bf16 inputs and output (float32 accumulators, float32 LSE), D = 64 and 128 (tuned) and
// 256 (correct; tiles not tuned).
inline const Supports kSupports{.dtypes = {DType::bfloat16, DType::float16}, .dims = {64, 128, 256}};

// The stage's forward (fa::DeviceForward): device views of contiguous [B,H,N,D] tensors of
// p.dtype, 16-byte aligned; O and LSE written, nothing allocated. Causal: the bottom-right mask,
// tiles above the diagonal skipped, the heaviest Q tiles first. Queued on ctx.stream.
void attention_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx);

// The other rungs, the same contract.
// warp_specialized: a producer warpgroup for the copies, two consumer warpgroups for the math,
// mbarriers between them (ladder/v2_warp_specialized.cuh).
void attention_forward_warp_specialized(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                                        DeviceContext& ctx);
// pingpong: the consumers take turns on the tensor cores (named barriers); overlap: and each one's
// softmax of tile j runs under its own P·V of tile j − 1 (ladder/v3_pingpong.cuh, v4_overlap.cuh).
void attention_forward_pingpong(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                                DeviceContext& ctx);
void attention_forward_overlap(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                               DeviceContext& ctx);
// The overlap rung with the policies a later stage passes in (fa/cuda/policies/): grouped-query
// heads (Hkv < Hq: the K/V tensor maps over B·Hkv heads, query head bh reading K/V head
// heads.kv_head(bh)), and, for a packed batch (p.packed(), fa/packed.hpp), its rows: rows.cu_seqlens
// a device array of p.cu_seqlens() as int, the grid's z the sequence. Stage 12's prefill runs it.
void attention_forward_overlap_with(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                                    DeviceContext& ctx, policies::GroupedHeads heads, policies::DenseRows rows);
void attention_forward_overlap_with(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                                    DeviceContext& ctx, policies::GroupedHeads heads, policies::PackedRows rows);
// persistent: overlap's work with one block per SM, each taking query tiles from a counter in
// turn, the next tile's copies under this one's end (ladder/v5_persistent.cuh); causal, the
// query tiles end at the last row and the heaviest tiles of a group of heads go first. Uses 4 bytes
// of static device memory (the counter), not allocated per call.
void attention_forward_persistent(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                                  DeviceContext& ctx);

// Empty on a GPU of compute capability 9.0 (sm_90a code runs there only), else the one line of why.
inline std::string hopper_skip_reason() {
  if (std::string why = cuda_skip_reason(90); !why.empty()) return why;
  const DeviceInfo d = query_device();
  if (d.compute_major == 9 && d.compute_minor == 0) return "";
  return "needs compute capability 9.0 (built for sm_90a, which runs there only); device 0 (" + d.name + ") is " +
         std::to_string(d.compute_major) + "." + std::to_string(d.compute_minor);
}

// Whether the stage's kernels run on `device` (compute capability 9.0), or on the current device;
// asked once per device: the later stages that pick stage 09 where it runs (12's prefill, 13's
// blocks) ask before every launch, and reading a device's properties takes far longer than a launch.
bool runs_on(int device);
bool runs_here();

// The course's fastest forward on the current device, as the later stages run it: this stage's
// overlap rung where it runs, stage 07 elsewhere; and which one that is ("09" or "07").
void fastest_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx);
const char* fastest_forward_stage();

// For the stage's tests, before their first kernel: "skipped: <why>" and exit 77 unless on 9.0.
inline void exit_skipped_unless_hopper() {
  if (const std::string why = hopper_skip_reason(); !why.empty()) {
    std::printf("skipped: %s\n", why.c_str());
    std::exit(77);
  }
}

}  // namespace fa::step09
