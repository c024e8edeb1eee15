// step08_tune — times stage 08's key-tile kernel (backward_tc_kernel.cuh) at the FlashAttention
// paper shapes (B·N = 16384 tokens, H·D = 2048, bf16) under several tile shapes (BackwardConfig):
// warps, blocks per SM, key blocks of 16 per warp, query tile Br, dQ row blocks per warp, warps per key
// block (2: a pair that divides the products); and under two grid orders (a head's key tiles or the
// heads on the grid's fast axis). The blocks per SM column is what the occupancy calculator gives for
// the launch. The measurements behind StageConfig and the grid order in tensor_core_backward.cu (at
// 4k keys the kernel alone has disagreed with the whole backward about the order: the stage's own runs
// decided there, docs/results/step08_named_barriers_h100.txt).
// A tuning aid: it verifies nothing (the tests and the stage executable do); the inputs are hashed
// uniforms and the LSE a constant, which changes the values, not the work.
//
//   build/steps/08_tensor_core_backward/step08_tune [N ...]        (default N = 4096; lab/run_on_gpu.sh runs it)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "08_tensor_core_backward/backward_tc_kernel.cuh"
#include "fa/cuda/check.cuh"
#include "fa/cuda/device_buffer.cuh"
#include "fa/cuda/event_timer.cuh"
#include "fa/cuda/fill.cuh"

namespace {

using namespace fa::step08;
using T = __nv_bfloat16;

__global__ void fill_value(float* x, long n, float value) {
  for (long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x)
    x[i] = value;
}

template <class C>
void row(long N, bool causal, bool key_tiles_first, const char* name) {
  const long H = 2048 / C::D, B = 16384 / N;
  fa::MemoryMeter meter;
  const std::size_t n = static_cast<std::size_t>(B * H * N * C::D), rows = static_cast<std::size_t>(B * H * N);
  fa::DeviceBuffer<T> q(meter, n), k(meter, n), v(meter, n), d_o(meter, n), dk(meter, n), dv(meter, n);
  fa::DeviceBuffer<float> dq(meter, n), lse2(meter, rows), delta(meter, rows);
  fa::fill_hashed_uniform<<<1024, 256>>>(q.data(), static_cast<long>(n), 1u, 0.0f, 3.4f);
  fa::fill_hashed_uniform<<<1024, 256>>>(k.data(), static_cast<long>(n), 2u, 0.0f, 3.4f);
  fa::fill_hashed_uniform<<<1024, 256>>>(v.data(), static_cast<long>(n), 3u, 0.0f, 3.4f);
  fa::fill_hashed_uniform<<<1024, 256>>>(d_o.data(), static_cast<long>(n), 4u, 0.0f, 3.4f);
  fill_value<<<1024, 256>>>(lse2.data(), static_cast<long>(rows), 12.0f);
  fill_value<<<1024, 256>>>(delta.data(), static_cast<long>(rows), 0.1f);
  FA_CUDA_CHECK_LAUNCH();
  auto kernel = backward_tc_kernel<T, C>;
  FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
  FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  const float scale = static_cast<float>(1.0 / std::sqrt(double(C::D)));
  const BackwardArgs<T> a{q.data(),  k.data(),      v.data(),  d_o.data(), lse2.data(), delta.data(),
                          dq.data(), dk.data(),     dv.data(), static_cast<int>(N), static_cast<int>(N),
                          static_cast<int>(N), scale, scale * static_cast<float>(M_LOG2E), causal, key_tiles_first};
  const dim3 grid = C::grid(B * H, N, key_tiles_first);
  const auto t = fa::time_device(
      [&](cudaStream_t s) {
        kernel<<<grid, C::kThreads, C::kSmemBytes, s>>>(a);
        FA_CUDA_CHECK_LAUNCH();
      },
      nullptr, 3, 15);
  const double flops = 2.5 * 4.0 * B * H * double(N) * N * C::D * (causal ? 0.5 : 1.0);
  int resident = 0;  // blocks per SM as launched (registers and shared memory permitting)
  FA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, C::kThreads, C::kSmemBytes));
  std::printf("  D=%-3d N=%-6ld %-8s %-22s %-6s %d/SM %7.3f ms %6.1f TFLOP/s\n", C::D, N, causal ? "causal" : "full",
              name, key_tiles_first ? "keys" : "heads", resident, t.median_ms, flops / (t.median_ms * 1e-3) / 1e12);
}

// A row: the grid's fast axis (heads or a head's key tiles), then BackwardConfig's arguments.
#define FA_ROW(N, causal, first, ...) row<BackwardConfig<__VA_ARGS__>>(N, causal, first, #__VA_ARGS__)

}  // namespace

int main(int argc, char** argv) {
  std::vector<long> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::atol(argv[i]));
  if (sizes.empty()) sizes = {4096};
  std::printf("The grid's fast axis, BackwardConfig<D, warps, blocks per SM, 16-key blocks per warp, Br, 16-query blocks per warp in dQ, warps per key block>, bf16, the key-tile kernel alone\n");
  for (const long N : sizes)
    for (const bool causal : {false, true}) {
      constexpr bool kHeads = false, kKeys = true;
      FA_ROW(N, causal, kHeads, 64, 8, 1);
      FA_ROW(N, causal, kHeads, 64, 4, 2, 2, 32);
      FA_ROW(N, causal, kHeads, 64, 8, 1, 2, 32);
      FA_ROW(N, causal, kKeys, 64, 4, 2, 2, 32);
      FA_ROW(N, causal, kKeys, 64, 8, 1, 2, 32);
      FA_ROW(N, causal, kHeads, 128, 8, 1);
      FA_ROW(N, causal, kHeads, 128, 8, 1, 1, 64, 2);
      FA_ROW(N, causal, kHeads, 128, 8, 1, 2, 64, 1, 2);
      FA_ROW(N, causal, kHeads, 128, 8, 1, 2, 64, 2, 2);
      FA_ROW(N, causal, kKeys, 128, 8, 1, 2, 64, 2, 2);
      FA_ROW(N, causal, kHeads, 128, 4, 2, 2, 64, 2, 2);
      FA_ROW(N, causal, kHeads, 256, 8, 1, 1, 64, 2, 2);
    }
  return 0;
}
