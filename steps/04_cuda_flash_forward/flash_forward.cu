// Stage 04 — the host side of the fused forward: checks, dispatch on D, launch.
//
// What changed from stage 03 (steps/03_cuda_naive): three kernels and two [B,H,Nq,Nk] buffers (S and
// P) became one kernel and no buffer at all. The DeviceContext's meter sees no allocation: the
// memory beyond Q, K, V, O and LSE is zero, measured (tests/test_flash_forward.cu).
//
// Build and run (verifies against stage 03 — sampled float64 rows where stage 03 runs out of
// memory — and charts both):
//   cmake -S . -B build -G Ninja && cmake --build build --target step04_cuda_flash_forward
//   build/steps/04_cuda_flash_forward/step04_cuda_flash_forward            (--help for the flags)
//
// Known limits, on purpose (docs/04_cuda_flash_forward.md):
// - float32 on CUDA cores (no tensor cores, no TF32): bound by FFMA issue, ~39 TFLOP/s on an H100.
// - D = 32, 64, 128 only (a template parameter); Nq ≤ 65535·64 (the grid's y), 32-bit tile indices.
// - Causal masks every tile, including the ones no row sees (stage 05 skips them).
// - One Q tile per block: few heads with a short Nq do not fill the GPU (no split-KV).
#include "04_cuda_flash_forward/flash_forward.cuh"

#include <climits>
#include <cmath>
#include <string>

#include "04_cuda_flash_forward/flash_forward_kernel.cuh"
#include "fa/cuda/check.cuh"
#include "fa/cuda/device.cuh"
#include "fa/cuda/shared_memory.cuh"
#include "fa/cuda/stage_arch.cuh"

namespace fa::step04 {

namespace {

template <int D>
void launch(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx) {
  constexpr int smem = smem_bytes<D>();
  // Above 48 KiB a block's dynamic shared memory must be asked for; the carveout asks the SM to
  // give shared memory all it can (228 KiB), so that min_blocks_per_sm<D>() blocks fit.
  static const bool configured = [] {
    FA_CUDA_CHECK(cudaFuncSetAttribute(flash_forward_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    FA_CUDA_CHECK(cudaFuncSetAttribute(flash_forward_kernel<D>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       cudaSharedmemCarveoutMaxShared));
    return true;
  }();
  (void)configured;
  KernelArgs a{in.q.as<float>(), in.k.as<float>(), in.v.as<float>(), out.o.as<float>(), out.lse.as<float>(),
               static_cast<int>(p.seq_q), static_cast<int>(p.seq_k),
               p.softmax_scale() * static_cast<float>(M_LOG2E), p.causal};
  const dim3 grid(static_cast<unsigned>(p.heads_total()), static_cast<unsigned>((p.seq_q + kBr - 1) / kBr));
  ctx.kernel_begin("flash_forward");
  flash_forward_kernel<D><<<grid, kThreads, smem, ctx.stream>>>(a);
  FA_CUDA_CHECK_LAUNCH();
  ctx.kernel_end("flash_forward");
}

int smem_bytes_at(std::int64_t dim) {
  return dim == 32 ? smem_bytes<32>() : dim == 64 ? smem_bytes<64>() : smem_bytes<128>();
}

// The kernel's shared memory at D against what this GPU gives one block (fa/cuda/shared_memory.cuh).
// On Turing (64 KiB) D = 32 and 64 fit and D = 128 (112 KiB) does not; a smaller tiling for it
// would be a new kernel. Cheap enough for every launch: two attribute queries, no device properties.
std::string shared_memory_refusal_at(std::int64_t dim, const char* stage) {
  std::string refusal = shared_memory_refusal(smem_bytes_at(dim), std::string("stage ") + stage +
                                                                       "'s kernel at D = " + std::to_string(dim));
  if (refusal.empty()) return refusal;
  std::string fit;
  for (const std::int64_t d : kSupports.dims)
    if (shared_memory_refusal(smem_bytes_at(d), "").empty()) fit += (fit.empty() ? "D = " : " and ") + std::to_string(d);
  return refusal + (fit.empty() ? "" : " (" + fit + " run here)");
}

}  // namespace

std::string device_refusal(const Problem& p, const char* stage) {
  // No GPU, or one older than the stage's minimum: the harness skips (exit 77), not refuses.
  if (!cuda_skip_reason(kStageMinComputeCapability).empty()) return "";
  if (p.dim != 32 && p.dim != 64 && p.dim != 128) return "";  // the CLI refuses it (kSupports)
  return shared_memory_refusal_at(p.dim, stage);
}

void check_launchable(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, const char* stage) {
  p.require(kSupports);
  const std::string who = std::string("stage ") + stage + ": ";
  // The grid's y dimension holds the Q tiles (at most 65535), x the B·H heads.
  if ((p.seq_q + kBr - 1) / kBr > 65535)
    throw UsageError(who + "Nq = " + std::to_string(p.seq_q) + " is too long (at most " +
                     std::to_string(65535 * kBr) + ")");
  if (p.seq_k > INT_MAX - 2 * kBc || p.heads_total() > INT_MAX)
    throw UsageError(who + "Nk or B·H is too large for 32-bit tile indices");
  if (!aligned16(in.q.data) || !aligned16(in.k.data) || !aligned16(in.v.data) || !aligned16(out.o.data))
    throw UsageError(who + "Q, K, V and O must be 16-byte aligned (the kernel moves float4)");
  if (const std::string refusal = shared_memory_refusal_at(p.dim, stage); !refusal.empty()) throw UsageError(refusal);
}

void attention_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                       DeviceContext& ctx) {
  check_launchable(p, in, out, "04");
  switch (p.dim) {
    case 32: launch<32>(p, in, out, ctx); break;
    case 64: launch<64>(p, in, out, ctx); break;
    default: launch<128>(p, in, out, ctx); break;
  }
}

}  // namespace fa::step04
