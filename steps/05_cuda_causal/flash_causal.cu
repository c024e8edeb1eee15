// Stage 05 — the host side: stage 04's checks and dispatch, the tile-order switch, and the host
// count of the tiles loaded and masked.
//
// What changed from stage 04 (diff steps/04_cuda_flash_forward/flash_forward.cu against this file):
// the kernel takes heavy_first; everything else is the same launch.
//
// Build and run (verifies against stage 04 with the mask on every tile, and charts both):
//   cmake -S . -B build -G Ninja && cmake --build build --target step05_cuda_causal
//   build/steps/05_cuda_causal/step05_cuda_causal                    (--help for the flags)
//
// Known limits: the diagonal tiles still compute the scores they mask; "heaviest first" relies on
// the hardware starting blocks in index order (true in practice, not promised); everything in
// stage 04's limits (float32 on CUDA cores, D ∈ {32, 64, 128}).
#include "05_cuda_causal/flash_causal.cuh"

#include <algorithm>
#include <cmath>

#include "04_cuda_flash_forward/flash_forward.cuh"
#include "05_cuda_causal/flash_causal_kernel.cuh"
#include "fa/cuda/check.cuh"

namespace fa::step05 {

namespace {

template <int D>
void launch(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx,
            bool heavy_first) {
  constexpr int smem = smem_bytes<D>();
  static const bool configured = [] {
    FA_CUDA_CHECK(cudaFuncSetAttribute(flash_causal_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    FA_CUDA_CHECK(cudaFuncSetAttribute(flash_causal_kernel<D>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       cudaSharedmemCarveoutMaxShared));
    return true;
  }();
  (void)configured;
  KernelArgs a{in.q.as<float>(), in.k.as<float>(), in.v.as<float>(), out.o.as<float>(), out.lse.as<float>(),
               static_cast<int>(p.seq_q), static_cast<int>(p.seq_k),
               p.softmax_scale() * static_cast<float>(M_LOG2E), p.causal, heavy_first};
  const dim3 grid(static_cast<unsigned>(p.heads_total()), static_cast<unsigned>((p.seq_q + kBr - 1) / kBr));
  ctx.kernel_begin("flash_causal");
  flash_causal_kernel<D><<<grid, kThreads, smem, ctx.stream>>>(a);
  FA_CUDA_CHECK_LAUNCH();
  ctx.kernel_end("flash_causal");
}

}  // namespace

TileCounts count_tiles(const Problem& p) {
  TileCounts c;
  const std::int64_t q_tiles = (p.seq_q + kBr - 1) / kBr, k_tiles = (p.seq_k + kBc - 1) / kBc;
  c.dense = p.heads_total() * q_tiles * k_tiles;
  for (std::int64_t t = 0; t < q_tiles; ++t) {
    const std::int64_t i0 = t * kBr, i_last = std::min(i0 + kBr, p.seq_q) - 1;
    const std::int64_t end = p.keys_visible(i_last), full = p.keys_visible(i0);
    const std::int64_t n = (end + kBc - 1) / kBc;
    const std::int64_t from = !p.causal || full == p.seq_k ? n : full / kBc;
    c.loaded += p.heads_total() * n;
    c.masked += p.heads_total() * (n - from);
  }
  return c;
}

void attention_forward_ordered(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                               DeviceContext& ctx, bool heavy_first) {
  step04::check_launchable(p, in, out, "05");
  switch (p.dim) {
    case 32: launch<32>(p, in, out, ctx, heavy_first); break;
    case 64: launch<64>(p, in, out, ctx, heavy_first); break;
    default: launch<128>(p, in, out, ctx, heavy_first); break;
  }
}

void attention_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                       DeviceContext& ctx) {
  attention_forward_ordered(p, in, out, ctx, /*heavy_first=*/true);
}

}  // namespace fa::step05
