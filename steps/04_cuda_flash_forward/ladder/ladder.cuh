// ladder.cuh — stage 04 as a ladder: the fused forward built up one idea at a time, each rung a
// working kernel in its own file, verified against float64 and against the rung below it
// (tests/test_ladder.cu), measured by the stage executable (`--ladder`), told in
// docs/04_cuda_flash_forward.md, "The ladder". `diff` between neighbouring files is the lesson.
//
//   v1_algorithm1     v1_algorithm1.cuh     FA2's Algorithm 1 as written: one thread per query row
//   v2_register_tile  v2_register_tile.cuh  the 8 × 4 register micro-tile, 128 threads, shuffles
//   v3_swizzle        v3_swizzle.cuh        the XOR swizzle: no bank conflicts in shared memory
//   v4_cp_async       v4_cp_async.cuh       cp.async: K_j, V_j stream in behind the arithmetic
//   flash             ../flash_forward_kernel.cuh  exp2 with τ·log2(e) folded into Q (the stage)
//
// Every rung has the stage's signature (fa::DeviceForward) and its checks (check_launchable):
// float32, D = 32, 64, 128, [B,H,N,D] contiguous and 16-byte aligned, Br = Bc = 64, causal masks
// every tile (stage 05 skips them). Nothing is allocated: O and LSE are written, nothing else.
//
// Registers per thread / shared memory per block (ptxas -v and cuobjdump --dump-resource-usage,
// sm_90, CUDA 13.0). No rung uses local memory for its arrays; * ptxas reports an 8-byte stack
// frame with 8 bytes of spill stores and loads, in v4 as in the stage's kernel:
//                      D = 32           D = 64           D = 128
//   v1_algorithm1      64 / 40.5 KiB    96 / 64.5 KiB    168 / 112.5 KiB
//   v2_register_tile   168 / 40 KiB     202 / 64 KiB     254 / 112 KiB
//   v3_swizzle         168 / 40 KiB     222 / 64 KiB     255 / 112 KiB
//   v4_cp_async        168 / 40 KiB     254 / 64 KiB     255 / 112 KiB *
//   flash              168 / 40 KiB     254 / 64 KiB     255 / 112 KiB *
#pragma once

#include "04_cuda_flash_forward/flash_forward.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/problem.hpp"
#include "fa/tensor.hpp"

namespace fa::step04::ladder {

void v1_algorithm1(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx);
void v2_register_tile(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx);
void v3_swizzle(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx);
void v4_cp_async(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx);

using RungForward = void (*)(const Problem&, const AttentionInputs&, const AttentionOutputs&, DeviceContext&);
struct Rung {
  const char* name;  // the variant name in the results ("v3_swizzle"); the top rung is "flash"
  const char* idea;  // what it adds to the rung below
  RungForward forward;
};

// Bottom to top; the last rung is the stage's own kernel.
inline constexpr Rung kLadder[] = {
    {"v1_algorithm1", "FA2's Algorithm 1 as written: one thread per query row, expf", &v1_algorithm1},
    {"v2_register_tile", "8 x 4 register micro-tile, 128 threads, warp-shuffle row max", &v2_register_tile},
    {"v3_swizzle", "XOR swizzle of the shared tiles: no bank conflicts", &v3_swizzle},
    {"v4_cp_async", "cp.async: K_j and V_j stream in behind the arithmetic", &v4_cp_async},
    {"flash", "exp2 with tau*log2(e) folded into Q: one MUFU.EX2 per score", &attention_forward},
};

}  // namespace fa::step04::ladder
