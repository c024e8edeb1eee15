// ladder.cu — the host side of stage 04's ladder: the same checks as the stage's kernel, dispatch
// on D, launch. The kernels and what each adds: ladder.cuh and the v*.cuh files beside it.
#include "04_cuda_flash_forward/ladder/ladder.cuh"

#include <string>

#include "04_cuda_flash_forward/ladder/v1_algorithm1.cuh"
#include "04_cuda_flash_forward/ladder/v2_register_tile.cuh"
#include "04_cuda_flash_forward/ladder/v3_swizzle.cuh"
#include "04_cuda_flash_forward/ladder/v4_cp_async.cuh"
#include "fa/cuda/check.cuh"

namespace fa::step04::ladder {

namespace {

// One launch of `kernel` over the grid (B·H, Q tiles of `rows`), `threads` per block, `smem` bytes
// of dynamic shared memory: above 48 KiB it must be asked for (once), and the carveout gives
// shared memory all the SM has, as for the top rung.
template <auto kernel, int rows, int threads, int smem>
void launch(const char* name, const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
            DeviceContext& ctx) {
  // A GPU that gives a block less (Turing: 64 KiB; v1 needs 64.5 KiB at D = 64) refuses, one line.
  int device = 0, limit = 0;
  FA_CUDA_CHECK(cudaGetDevice(&device));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (smem > limit)
    throw UsageError(std::string("stage 04 ") + name + " at D = " + std::to_string(p.dim) + " needs " +
                     std::to_string(smem) + " bytes of shared memory per block; this GPU gives at most " +
                     std::to_string(limit));
  static const bool configured = [] {
    FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       cudaSharedmemCarveoutMaxShared));
    return true;
  }();
  (void)configured;
  const RungArgs a{in.q.as<float>(), in.k.as<float>(), in.v.as<float>(), out.o.as<float>(), out.lse.as<float>(),
                   static_cast<int>(p.seq_q), static_cast<int>(p.seq_k), p.softmax_scale(), p.causal};
  const dim3 grid(static_cast<unsigned>(p.heads_total()), static_cast<unsigned>((p.seq_q + rows - 1) / rows));
  ctx.kernel_begin(name);
  kernel<<<grid, threads, smem, ctx.stream>>>(a);
  FA_CUDA_CHECK_LAUNCH();
  ctx.kernel_end(name);
}

}  // namespace

// check_launchable has refused every D but 32, 64 and 128.
void v1_algorithm1(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx) {
  check_launchable(p, in, out, "04 v1_algorithm1");
  const char* name = "v1_algorithm1";
  switch (p.dim) {
    case 32: launch<v1_algorithm1_kernel<32>, v1::Br, v1::Br, v1::smem_bytes<32>()>(name, p, in, out, ctx); break;
    case 64: launch<v1_algorithm1_kernel<64>, v1::Br, v1::Br, v1::smem_bytes<64>()>(name, p, in, out, ctx); break;
    default: launch<v1_algorithm1_kernel<128>, v1::Br, v1::Br, v1::smem_bytes<128>()>(name, p, in, out, ctx); break;
  }
}

void v2_register_tile(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx) {
  check_launchable(p, in, out, "04 v2_register_tile");
  const char* name = "v2_register_tile";
  switch (p.dim) {
    case 32: launch<v2_register_tile_kernel<32>, v2::kBr, v2::kThreads, v2::smem_bytes<32>()>(name, p, in, out, ctx); break;
    case 64: launch<v2_register_tile_kernel<64>, v2::kBr, v2::kThreads, v2::smem_bytes<64>()>(name, p, in, out, ctx); break;
    default: launch<v2_register_tile_kernel<128>, v2::kBr, v2::kThreads, v2::smem_bytes<128>()>(name, p, in, out, ctx); break;
  }
}

void v3_swizzle(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx) {
  check_launchable(p, in, out, "04 v3_swizzle");
  const char* name = "v3_swizzle";
  switch (p.dim) {
    case 32: launch<v3_swizzle_kernel<32>, v3::kBr, v3::kThreads, v3::smem_bytes<32>()>(name, p, in, out, ctx); break;
    case 64: launch<v3_swizzle_kernel<64>, v3::kBr, v3::kThreads, v3::smem_bytes<64>()>(name, p, in, out, ctx); break;
    default: launch<v3_swizzle_kernel<128>, v3::kBr, v3::kThreads, v3::smem_bytes<128>()>(name, p, in, out, ctx); break;
  }
}

void v4_cp_async(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx) {
  check_launchable(p, in, out, "04 v4_cp_async");
  const char* name = "v4_cp_async";
  switch (p.dim) {
    case 32: launch<v4_cp_async_kernel<32>, v4::kBr, v4::kThreads, v4::smem_bytes<32>()>(name, p, in, out, ctx); break;
    case 64: launch<v4_cp_async_kernel<64>, v4::kBr, v4::kThreads, v4::smem_bytes<64>()>(name, p, in, out, ctx); break;
    default: launch<v4_cp_async_kernel<128>, v4::kBr, v4::kThreads, v4::smem_bytes<128>()>(name, p, in, out, ctx); break;
  }
}

}  // namespace fa::step04::ladder
