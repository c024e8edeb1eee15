// Stage 07 — the host side: the problem's checks, the tile shape of each head dim, and the launch.
//
// What changed from stage 05 (steps/05_cuda_causal/flash_causal.cu): two element types (a template
// parameter T, from the problem's dtype) instead of float32, five head dims, and a tile shape per
// head dim, chosen by measurement (docs/07_tensor_cores.md, "The ladder, measured").
//
// Build and run (verifies against float64 and stage 05 on the same inputs in float32):
//   cmake -S . -B build -G Ninja && cmake --build build --target step07_tensor_cores
//   build/steps/07_tensor_cores/step07_tensor_cores                   (--help for the flags)
//
// Known limits: mma.sync is Ampere's instruction; on the H100 cuDNN's wgmma kernels run 1.3-1.7x
// faster at N >= 4k (docs/results/compare_07_h100.json, where the stage leads PyTorch's
// FlashAttention-2 by 5-22 %; Hopper's instructions: stage 09). Forward only (stage 08), no
// grouped heads or packed batches (stage 11).
#include "07_tensor_cores/tensor_cores.cuh"

#include "07_tensor_cores/flash_tc_kernel.cuh"
#include "fa/cuda/tc/launch.cuh"
#include "fa/cuda/device.cuh"
#include "fa/cuda/stage_arch.cuh"

namespace fa::step07 {
using namespace tc;  // the tile and fragment building blocks (common/cuda/include/fa/cuda/tc/)

namespace {

// The tile shape per head dim (FlashConfig<D, warps, 16-row slices per warp, Bc, blocks per SM>),
// chosen with step07_tune on the H100 (docs/results/step07_tune_h100.txt, step07_tune_swizzle_h100.txt,
// step07_tune_addresses_h100.txt): every warp owns 32 rows, 4 warps (Br = 128), two blocks per SM.
// D = 64: Bc = 128, 80 KiB of shared memory per block; it spills 40 bytes per thread, and still
// beats Bc = 64 by 5-9 % at N = 4k and 16k. D = 128: Bc = 64, 96 KiB; with the loop's addresses
// out of the loop, 4 warps beat 8 (Br = 256).
// D = 256: 16 rows per warp and Bc = 32 keep O's 128 registers per thread and the shared memory
// (96 KiB) in bounds.
template <int D>
struct StageConfig;
template <>
struct StageConfig<32> : FlashConfig<32, 4, 2, 64, 2> {};
template <>
struct StageConfig<64> : FlashConfig<64, 4, 2, 128, 2> {};
template <>
struct StageConfig<96> : FlashConfig<96, 4, 2, 64, 1> {};
template <>
struct StageConfig<128> : FlashConfig<128, 4, 2, 64, 2> {};
template <>
struct StageConfig<256> : FlashConfig<256, 4, 1, 32, 1> {};

template <class T, int D>
void launch_stage(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx,
                  bool heavy_first) {
  using C = StageConfig<D>;
  launch<T, flash_tc_kernel<T, C>, C::kThreads, C::kBr, C::kSmemBytes>("flash", p, in, out, ctx, heavy_first);
}

template <class T>
void dispatch(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx,
              bool heavy_first) {
  switch (p.dim) {
    case 32: return launch_stage<T, 32>(p, in, out, ctx, heavy_first);
    case 64: return launch_stage<T, 64>(p, in, out, ctx, heavy_first);
    case 96: return launch_stage<T, 96>(p, in, out, ctx, heavy_first);
    case 128: return launch_stage<T, 128>(p, in, out, ctx, heavy_first);
    default: return launch_stage<T, 256>(p, in, out, ctx, heavy_first);
  }
}

void forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx,
             bool heavy_first) {
  p.require(kSupports);
  if (p.dtype == DType::float16)
    dispatch<__half>(p, in, out, ctx, heavy_first);
  else
    dispatch<__nv_bfloat16>(p, in, out, ctx, heavy_first);
}

template <int D>
long long smem_at() {
  return StageConfig<D>::kSmemBytes;
}

}  // namespace

void attention_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx) {
  forward(p, in, out, ctx, /*heavy_first=*/true);
}

void attention_forward_in_order(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                                DeviceContext& ctx) {
  forward(p, in, out, ctx, /*heavy_first=*/false);
}

std::string device_refusal(const Problem& p) {
  if (!cuda_skip_reason(kStageMinComputeCapability).empty()) return "";  // the harness skips
  long long smem = 0;
  switch (p.dim) {
    case 32: smem = smem_at<32>(); break;
    case 64: smem = smem_at<64>(); break;
    case 96: smem = smem_at<96>(); break;
    case 128: smem = smem_at<128>(); break;
    case 256: smem = smem_at<256>(); break;
    default: return "";  // the CLI refuses it (kSupports)
  }
  return shared_memory_refusal(smem, "stage 07's kernel at D = " + std::to_string(p.dim));
}

}  // namespace fa::step07
