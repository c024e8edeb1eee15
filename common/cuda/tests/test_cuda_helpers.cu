// GPU tests of the CUDA helpers. Skipped (exit 77) without a device.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "fa/cuda/check.cuh"
#include "fa/cuda/device.cuh"
#include "fa/cuda/device_buffer.cuh"
#include "fa/cuda/event_timer.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/random.hpp"

namespace {

__global__ void copy_kernel(const float* in, float* out, long n) {
  for (long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x)
    out[i] = in[i];
}

}  // namespace

TEST_CASE("a failing CUDA call throws with file, line and CUDA's message") {
  try {
    FA_CUDA_CHECK(cudaMemcpy(nullptr, reinterpret_cast<void*>(0x10), 64, cudaMemcpyDeviceToDevice));
    FAIL("no exception");
  } catch (const fa::CudaError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("test_cuda_helpers.cu:") != std::string::npos);
    CHECK(msg.find("cudaMemcpy") != std::string::npos);
    CHECK(msg.find("cudaError") != std::string::npos);
  }
  cudaGetLastError();
}

TEST_CASE("a bad launch is caught by FA_CUDA_CHECK_LAUNCH") {
  copy_kernel<<<1, 4096>>>(nullptr, nullptr, 0);  // 4096 threads per block is over the limit
  CHECK_THROWS_AS(FA_CUDA_CHECK_LAUNCH(), fa::CudaError);
}

TEST_CASE("device buffers are counted, and the driver agrees with the meter") {
  fa::MemoryMeter meter;
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  const auto before = fa::DriverMemoryProbe::used_bytes();
  {
    fa::DeviceBuffer<float> a(meter, 64ull << 20);  // 256 MiB
    CHECK(meter.current() == (256ll << 20));
    const auto driver = fa::DriverMemoryProbe::used_bytes() - before;
    // The driver allocates in pages; the meter counts exact bytes. They agree within 8 MiB.
    CHECK(driver >= (256ll << 20));
    CHECK(driver <= (256ll << 20) + (8ll << 20));
  }
  CHECK(meter.current() == 0);
  CHECK(meter.peak() == (256ll << 20));
  CHECK(fa::DriverMemoryProbe::used_bytes() - before <= (8ll << 20));
}

TEST_CASE("an allocation larger than the device is OutOfMemory, and the device stays usable") {
  fa::MemoryMeter meter;
  const auto info = fa::query_device();
  CHECK_THROWS_AS(fa::DeviceBuffer<char>(meter, static_cast<std::size_t>(info.total_memory) * 2), fa::OutOfMemory);
  CHECK(meter.current() == 0);
  fa::DeviceBuffer<float> ok(meter, 1024);  // the context still works after the failure
  FA_CUDA_CHECK(cudaMemset(ok.data(), 0, ok.bytes()));
  FA_CUDA_CHECK(cudaDeviceSynchronize());
}

TEST_CASE("a meter limit turns allocations into OutOfMemory before cudaMalloc") {
  fa::MemoryMeter meter(1 << 20);
  CHECK_THROWS_AS(fa::DeviceBuffer<float>(meter, 1 << 20), fa::OutOfMemory);
}

TEST_CASE("poisoned buffers read back as NaN") {
  fa::MemoryMeter meter;
  fa::DeviceBuffer<float> b(meter, 100);
  b.poison();
  std::vector<float> host(100);
  b.download(host.data(), 100);
  for (float x : host) CHECK(std::isnan(x));
}

TEST_CASE("the event timer measures: a 16x larger copy takes longer") {
  fa::MemoryMeter meter;
  const long n = 1l << 26;  // 256 MiB of floats
  fa::DeviceBuffer<float> in(meter, n), out(meter, n);
  auto copy = [&](long count) {
    return fa::time_device([&](cudaStream_t s) {
      copy_kernel<<<1024, 256, 0, s>>>(in.data(), out.data(), count);
      FA_CUDA_CHECK_LAUNCH();
    }, nullptr, 2, 9);
  };
  const auto small = copy(n / 16), large = copy(n);
  CHECK(small.median_ms > 0.0);
  CHECK(large.median_ms > small.median_ms);
  CHECK(large.reps == 9);
  MESSAGE("copy of 2 x 256 MiB: " << large.median_ms << " ms = "
                                  << 2.0 * n * 4 / (large.median_ms * 1e-3) / 1e12 << " TB/s");
}

TEST_CASE("the device query fills the results metadata") {
  const auto d = fa::query_device();
  CHECK_FALSE(d.name.empty());
  CHECK(d.sm_count > 0);
  const auto m = fa::device_metadata("test");
  CHECK(m.device == d.name);
  CHECK_FALSE(m.cuda_runtime.empty());
  CHECK(m.extra.count("sm_count") == 1);
}

TEST_CASE("the cheap compute capability agrees with the full device query") {
  FA_CUDA_CHECK(cudaSetDevice(0));
  const auto d = fa::query_device(0);
  CHECK(fa::current_compute_capability() == d.compute_major * 10 + d.compute_minor);
}

TEST_CASE("scratch buffers are reused across calls and counted") {
  fa::MemoryMeter meter;
  fa::DeviceContext ctx(meter);
  float* a = ctx.scratch_as<float>("S", 1000);
  float* b = ctx.scratch_as<float>("S", 500);
  CHECK(a == b);
  CHECK(meter.current() == 4000);
}
