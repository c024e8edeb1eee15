// Stage 04 — the fused flash-attention forward on CUDA cores (float32). See flash_forward_kernel.cuh
// for the kernel, its tile picture and its byte counts, and docs/04_cuda_flash_forward.md.
#pragma once

#include <cstdint>
#include <string>

#include "fa/cuda/stage_gpu.cuh"
#include "fa/problem.hpp"
#include "fa/tensor.hpp"

namespace fa::step04 {

// What the kernel runs: float32, and the head dims it is compiled for (a template parameter: the
// D loop is unrolled and the O accumulator is a register array). Anything else is a UsageError
// (exit 2). Stage 05 runs the same.
inline const Supports kSupports{.dtypes = {DType::float32}, .dims = {32, 64, 128}};

// The stage's forward, the signature every GPU stage shares (fa::DeviceForward): device views of
// contiguous [B,H,N,D] float32 tensors (16-byte aligned, as cudaMalloc gives), O and LSE
// written, nothing else allocated. Causal applies the mask to every tile (no tile skipped: that is
// stage 05). Queued on ctx.stream; errors of the launch are thrown, errors of the run surface at
// the next synchronisation.
void attention_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                       DeviceContext& ctx);

// The launch checks shared by stages 04 and 05: D supported, Nq small enough for the grid,
// pointers aligned, the kernel's shared memory within what this GPU gives a block (D = 128 needs
// 112 KiB: not on Turing's 64 KiB nor sm_86/89's 99 KiB). Throws UsageError with one line.
void check_launchable(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, const char* stage);

// For a stage's main, before the run: empty when this GPU can run the kernel at p.dim (and when
// there is no suitable GPU: the harness skips then); otherwise the one line of the refusal
// (exit 2; fa::refuse_on_this_device, fa/cuda/stage_arch.cuh).
std::string device_refusal(const Problem& p, const char* stage);

}  // namespace fa::step04
