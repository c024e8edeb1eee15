#include "fa/cuda/device_buffer.cuh"

#include <string>

namespace fa {

void* device_malloc(MemoryMeter& meter, std::size_t bytes) {
  meter.on_alloc(static_cast<std::int64_t>(bytes));  // throws OutOfMemory past the meter's limit
  void* ptr = nullptr;
  const cudaError_t err = cudaMalloc(&ptr, bytes == 0 ? 1 : bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // an allocation failure is not sticky: clear it and carry on
    meter.on_free(static_cast<std::int64_t>(bytes));
    throw OutOfMemory("cudaMalloc of " + format_bytes(static_cast<double>(bytes)) + " failed: out of device memory");
  }
  if (err != cudaSuccess) {
    meter.on_free(static_cast<std::int64_t>(bytes));
    cuda_check(err, "cudaMalloc", __FILE__, __LINE__);
  }
  return ptr;
}

void device_free(MemoryMeter& meter, void* ptr, std::size_t bytes) noexcept {
  cudaFree(ptr);  // no throw from destructors; a failure here surfaces at the next checked call
  meter.on_free(static_cast<std::int64_t>(bytes));
}

std::int64_t DriverMemoryProbe::used_bytes() {
  std::size_t free_bytes = 0, total_bytes = 0;
  FA_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return static_cast<std::int64_t>(total_bytes - free_bytes);
}

}  // namespace fa
