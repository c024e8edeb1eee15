// Stage 05 — the host side: stage 04's checks and dispatch, the tile-order switch, and the test-mode
// tile counters.
//
// What changed from stage 04 (diff steps/04_cuda_flash_forward/flash_forward.cu against this file):
// the kernel takes heavy_first and an optional counter buffer; everything else is the same launch.
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
#include "fa/cli.hpp"
#include "fa/cuda/check.cuh"

namespace fa::step05 {

namespace {

template <int D, bool kCount>
void launch(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx,
            const CausalOptions& opt, unsigned long long* counters) {
  constexpr int smem = smem_bytes<D>();
  static const bool configured = [] {
    FA_CUDA_CHECK(cudaFuncSetAttribute(flash_causal_kernel<D, kCount>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    FA_CUDA_CHECK(cudaFuncSetAttribute(flash_causal_kernel<D, kCount>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       cudaSharedmemCarveoutMaxShared));
    return true;
  }();
  (void)configured;
  KernelArgs a{in.q, in.k, in.v, out.o, out.lse, static_cast<int>(p.seq_q), static_cast<int>(p.seq_k),
               p.softmax_scale() * static_cast<float>(M_LOG2E), p.causal, opt.heavy_first, counters};
  const dim3 grid(static_cast<unsigned>(p.heads_total()), static_cast<unsigned>((p.seq_q + kBr - 1) / kBr));
  ctx.kernel_begin("flash_causal");
  flash_causal_kernel<D, kCount><<<grid, kThreads, smem, ctx.stream>>>(a);
  FA_CUDA_CHECK_LAUNCH();
  ctx.kernel_end("flash_causal");
}

template <bool kCount>
void dispatch(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx,
              const CausalOptions& opt, unsigned long long* counters) {
  switch (p.dim) {
    case 32: launch<32, kCount>(p, in, out, ctx, opt, counters); break;
    case 64: launch<64, kCount>(p, in, out, ctx, opt, counters); break;
    default: launch<128, kCount>(p, in, out, ctx, opt, counters); break;
  }
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

void attention_forward_with(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                            DeviceContext& ctx, const CausalOptions& opt) {
  step04::check_launchable(p, in, out, "05");
  if (!opt.count_tiles) {
    dispatch<false>(p, in, out, ctx, opt, nullptr);
    return;
  }
  auto* counters = ctx.scratch_as<unsigned long long>("step05/tile_counters", 2);
  FA_CUDA_CHECK(cudaMemsetAsync(counters, 0, 2 * sizeof(unsigned long long), ctx.stream));
  dispatch<true>(p, in, out, ctx, opt, counters);
  unsigned long long host[2] = {0, 0};
  FA_CUDA_CHECK(cudaMemcpyAsync(host, counters, sizeof host, cudaMemcpyDeviceToHost, ctx.stream));
  FA_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  ctx.counters["kv_tiles_loaded"] = static_cast<double>(host[0]);
  ctx.counters["kv_tiles_masked"] = static_cast<double>(host[1]);
  ctx.counters["kv_tiles_dense"] = static_cast<double>(count_tiles(p).dense);
}

void attention_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                       DeviceContext& ctx) {
  CausalOptions opt;
  if (ctx.options) opt.count_tiles = ctx.options->flag("--count-tiles");
  attention_forward_with(p, in, out, ctx, opt);
}

}  // namespace fa::step05
