// step07_tune — times stage 07's kernel (flash_tc_kernel.cuh) at the FlashAttention paper shapes
// (B·N = 16384 tokens, H·D = 2048, bf16) under several tile shapes: warps per block, 16-row slices
// per warp, Bc, blocks per SM. The measurements behind StageConfig in
// tensor_cores.cu (docs/07_tensor_cores.md). A tuning aid: it verifies nothing (the tests and the
// stage executable do).
//
//   build/steps/07_tensor_cores/step07_tune [N ...]        (default N = 4096; lab/run_on_gpu.sh runs it)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "07_tensor_cores/flash_tc_kernel.cuh"
#include "fa/cuda/check.cuh"
#include "fa/cuda/device_buffer.cuh"
#include "fa/cuda/event_timer.cuh"
#include "fa/cuda/fill.cuh"

namespace {

using namespace fa::step07;
using namespace fa::tc;
using T = __nv_bfloat16;

template <class C>
void row(long N, bool causal, const char* name) {
  const long H = 2048 / C::D, B = 16384 / N;
  fa::MemoryMeter meter;
  const std::size_t n = static_cast<std::size_t>(B * H * N * C::D);
  fa::DeviceBuffer<T> q(meter, n), k(meter, n), v(meter, n), o(meter, n);
  fa::DeviceBuffer<float> lse(meter, static_cast<std::size_t>(B * H * N));
  fa::fill_hashed_uniform<<<1024, 256>>>(q.data(), static_cast<long>(n), 1u, 0.5f, 3.4f);
  fa::fill_hashed_uniform<<<1024, 256>>>(k.data(), static_cast<long>(n), 2u, 0.5f, 3.4f);
  fa::fill_hashed_uniform<<<1024, 256>>>(v.data(), static_cast<long>(n), 3u, 0.5f, 3.4f);
  FA_CUDA_CHECK_LAUNCH();
  auto kernel = flash_tc_kernel<T, C>;
  FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
  FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  const float scale = static_cast<float>(1.0 / std::sqrt(double(C::D)));
  const KernelArgs<T> a{q.data(), k.data(), v.data(), o.data(), lse.data(), static_cast<int>(N), static_cast<int>(N),
                        scale, scale * static_cast<float>(M_LOG2E), causal, causal};
  const dim3 grid(static_cast<unsigned>(B * H), static_cast<unsigned>((N + C::kBr - 1) / C::kBr));
  const auto t = fa::time_device(
      [&](cudaStream_t s) {
        kernel<<<grid, C::kThreads, C::kSmemBytes, s>>>(a);
        FA_CUDA_CHECK_LAUNCH();
      },
      nullptr, 3, 15);
  const double flops = 4.0 * B * H * double(N) * N * C::D * (causal ? 0.5 : 1.0);
  std::printf("  D=%-3d N=%-6ld %-8s %-44s %7.3f ms %6.1f TFLOP/s\n", C::D, N, causal ? "causal" : "full", name,
              t.median_ms, flops / (t.median_ms * 1e-3) / 1e12);
}

#define FA_ROW(N, causal, ...) row<FlashConfig<__VA_ARGS__>>(N, causal, #__VA_ARGS__)

}  // namespace

int main(int argc, char** argv) {
  std::vector<long> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::atol(argv[i]));
  if (sizes.empty()) sizes = {4096};
  std::printf("FlashConfig<D, warps, 16-row slices per warp, Bc, blocks per SM>, bf16\n");
  for (const long N : sizes)
    for (const bool causal : {false, true}) {
      FA_ROW(N, causal, 64, 4, 2, 64, 2);
      FA_ROW(N, causal, 64, 4, 2, 128, 2);
      FA_ROW(N, causal, 64, 8, 1, 64, 2);
      FA_ROW(N, causal, 64, 8, 2, 128, 1);
      FA_ROW(N, causal, 128, 4, 2, 64, 2);
      FA_ROW(N, causal, 128, 4, 2, 32, 2);
      FA_ROW(N, causal, 128, 8, 1, 64, 2);
      FA_ROW(N, causal, 128, 8, 2, 64, 1);
    }
  return 0;
}
