// step04_tune — times the stage 04 kernel at the FlashAttention paper shapes (B·N = 16384 tokens,
// H·D = 2048) under several register budgets (blocks per SM the compiler plans for), causal and
// not. A tuning aid for docs/notes/04_cuda_flash_forward.md, not part of the tour; it verifies
// nothing (the tests and the stage executable do).
//
//   build/steps/04_cuda_flash_forward/step04_tune [N ...]        (default N = 4096)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "04_cuda_flash_forward/flash_forward_kernel.cuh"
#include "fa/cuda/check.cuh"
#include "fa/cuda/device.cuh"
#include "fa/cuda/device_buffer.cuh"
#include "fa/cuda/event_timer.cuh"
#include "fa/cuda/fill.cuh"

namespace {

using namespace fa::step04;

template <int D, int MB>
double run(long B, long H, long N, bool causal, const float* q, const float* k, const float* v, float* o, float* lse) {
  constexpr int smem = smem_bytes<D>();
  FA_CUDA_CHECK(cudaFuncSetAttribute(flash_forward_kernel<D, MB>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  FA_CUDA_CHECK(cudaFuncSetAttribute(flash_forward_kernel<D, MB>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     cudaSharedmemCarveoutMaxShared));
  KernelArgs a{q, k, v, o, lse, static_cast<int>(N), static_cast<int>(N),
               static_cast<float>(1.0 / std::sqrt(double(D)) * M_LOG2E), causal};
  const dim3 grid(static_cast<unsigned>(B * H), static_cast<unsigned>((N + kBr - 1) / kBr));
  const auto t = fa::time_device(
      [&](cudaStream_t s) {
        flash_forward_kernel<D, MB><<<grid, kThreads, smem, s>>>(a);
        FA_CUDA_CHECK_LAUNCH();
      },
      nullptr, 2, 10);
  double flops = 4.0 * B * H * double(N) * N * D * (causal ? 0.5 : 1.0);
  return flops / (t.median_ms * 1e-3) / 1e12;
}

template <int D, int MB>
void row(long N) {
  const long H = 2048 / D, B = 16384 / N;
  fa::MemoryMeter meter;
  const std::size_t n = static_cast<std::size_t>(B * H * N * D);
  fa::DeviceBuffer<float> q(meter, n), k(meter, n), v(meter, n), o(meter, n), lse(meter, static_cast<std::size_t>(B * H * N));
  fa::fill_hashed_uniform<<<1024, 256>>>(q.data(), static_cast<long>(n), 1u, 0.5f, 3.4f);
  fa::fill_hashed_uniform<<<1024, 256>>>(k.data(), static_cast<long>(n), 2u, 0.5f, 3.4f);
  fa::fill_hashed_uniform<<<1024, 256>>>(v.data(), static_cast<long>(n), 3u, 0.5f, 3.4f);
  FA_CUDA_CHECK_LAUNCH();
  int blocks = 0;
  FA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, flash_forward_kernel<D, MB>, kThreads, smem_bytes<D>()));
  const double full = run<D, MB>(B, H, N, false, q.data(), k.data(), v.data(), o.data(), lse.data());
  const double causal = run<D, MB>(B, H, N, true, q.data(), k.data(), v.data(), o.data(), lse.data());
  cudaFuncAttributes attr{};
  FA_CUDA_CHECK(cudaFuncGetAttributes(&attr, flash_forward_kernel<D, MB>));
  std::printf("D=%3d N=%6ld B=%3ld H=%2ld  budget %d blk/SM: %3d regs, %4zu B local, occupancy %d blk/SM   "
              "%6.2f TFLOP/s   causal (masked) %6.2f TFLOP/s\n",
              D, N, B, H, MB, attr.numRegs, attr.localSizeBytes, blocks, full, causal);
}

// One launch at N = 4096 (B = 4, H = 2048 / D), for `ncu -k regex:flash --launch-count 1`.
template <int D>
void profile() {
  const long N = 4096, H = 2048 / D, B = 16384 / N;
  fa::MemoryMeter meter;
  const std::size_t n = static_cast<std::size_t>(B * H * N * D);
  fa::DeviceBuffer<float> q(meter, n), k(meter, n), v(meter, n), o(meter, n), lse(meter, static_cast<std::size_t>(B * H * N));
  fa::fill_hashed_uniform<<<1024, 256>>>(q.data(), static_cast<long>(n), 1u, 0.5f, 3.4f);
  fa::fill_hashed_uniform<<<1024, 256>>>(k.data(), static_cast<long>(n), 2u, 0.5f, 3.4f);
  fa::fill_hashed_uniform<<<1024, 256>>>(v.data(), static_cast<long>(n), 3u, 0.5f, 3.4f);
  constexpr int smem = smem_bytes<D>();
  FA_CUDA_CHECK(cudaFuncSetAttribute(flash_forward_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  FA_CUDA_CHECK(cudaFuncSetAttribute(flash_forward_kernel<D>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     cudaSharedmemCarveoutMaxShared));
  KernelArgs a{q.data(), k.data(), v.data(), o.data(), lse.data(), static_cast<int>(N), static_cast<int>(N),
               static_cast<float>(1.0 / std::sqrt(double(D)) * M_LOG2E), false};
  flash_forward_kernel<D><<<dim3(static_cast<unsigned>(B * H), static_cast<unsigned>(N / kBr)), kThreads, smem>>>(a);
  FA_CUDA_CHECK_LAUNCH();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace

int main(int argc, char** argv) {
  if (!fa::cuda_device_available()) {
    std::printf("skipped: %s\n", fa::cuda_skip_reason().c_str());
    return 77;
  }
  std::vector<long> sizes;
  if (argc == 3 && std::string(argv[1]) == "--profile") {  // one launch of the default kernel, for ncu
    const int d = std::atoi(argv[2]);
    if (d == 64) profile<64>();
    else if (d == 128) profile<128>();
    else return 2;
    return 0;
  }
  for (int i = 1; i < argc; ++i) sizes.push_back(std::atol(argv[i]));
  if (sizes.empty()) sizes = {4096};
  std::printf("on %s\n", fa::query_device().name.c_str());
  for (long N : sizes) {
    row<32, 4>(N);
    row<32, 3>(N);
    row<64, 3>(N);
    row<64, 2>(N);
    row<128, 2>(N);
    row<128, 1>(N);
  }
  return 0;
}
