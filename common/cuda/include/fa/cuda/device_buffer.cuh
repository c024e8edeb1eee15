// device_buffer.cuh — RAII device memory whose bytes are counted.
//
// Every cudaMalloc of a stage goes through a DeviceBuffer (or DeviceContext::scratch), which
// reports it to a MemoryMeter: current and peak bytes, measured. DriverMemoryProbe reads the
// driver's free-memory figure so that a test can cross-check the meter against it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "fa/cuda/check.cuh"
#include "fa/memory.hpp"

namespace fa {

// cudaMalloc that turns "out of memory" (or the meter's limit) into fa::OutOfMemory.
void* device_malloc(MemoryMeter& meter, std::size_t bytes);
void device_free(MemoryMeter& meter, void* ptr, std::size_t bytes) noexcept;

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(MemoryMeter& meter, std::size_t count)
      : meter_(&meter), count_(count), data_(static_cast<T*>(device_malloc(meter, count * sizeof(T)))) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    DeviceBuffer tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (data_) device_free(*meter_, data_, bytes());
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }

  void upload(const T* host, std::size_t count) {
    FA_CUDA_CHECK(cudaMemcpy(data_, host, count * sizeof(T), cudaMemcpyHostToDevice));
  }
  void download(T* host, std::size_t count) const {
    FA_CUDA_CHECK(cudaMemcpy(host, data_, count * sizeof(T), cudaMemcpyDeviceToHost));
  }
  // Fill every byte with 0xFF: for float32 that is a NaN, so an element nobody writes fails.
  void poison() { FA_CUDA_CHECK(cudaMemset(data_, 0xFF, bytes())); }

 private:
  void swap(DeviceBuffer& o) noexcept {
    std::swap(meter_, o.meter_);
    std::swap(count_, o.count_);
    std::swap(data_, o.data_);
  }
  MemoryMeter* meter_ = nullptr;
  std::size_t count_ = 0;
  T* data_ = nullptr;
};

// The driver's view: used bytes = total - free. Its granularity is pages (2 MiB), and the CUDA
// context itself takes memory, so compare differences, not absolute figures.
struct DriverMemoryProbe {
  static std::int64_t used_bytes();
};

}  // namespace fa
