// memory.hpp — memory that is measured, not computed from a formula.
//
// Every buffer a stage allocates for its own work goes through a MemoryMeter, which counts the
// bytes actually allocated (current and peak). On the host a stage takes its workspace from
// HostBuffer; on the device, fa/cuda/device_buffer.cuh counts cudaMalloc the same way and
// cross-checks the total with the driver's free-memory figure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>

namespace fa {

// Thrown when an allocation does not fit: the harness turns it into an `oom` row, not a crash.
struct OutOfMemory : std::bad_alloc {
  explicit OutOfMemory(std::string what) : what_(std::move(what)) {}
  const char* what() const noexcept override { return what_.c_str(); }
  std::string what_;
};

class MemoryMeter {
 public:
  // `limit_bytes` = 0: no limit beyond what the allocator gives.
  explicit MemoryMeter(std::int64_t limit_bytes = 0) : limit_(limit_bytes) {}

  void on_alloc(std::int64_t bytes);   // throws OutOfMemory when the limit would be passed
  void on_free(std::int64_t bytes);
  void reset_peak() { peak_ = current_; }

  std::int64_t current() const { return current_; }
  std::int64_t peak() const { return peak_; }
  std::int64_t limit() const { return limit_; }
  std::int64_t allocations() const { return allocations_; }

 private:
  std::int64_t limit_ = 0;
  std::int64_t current_ = 0;
  std::int64_t peak_ = 0;
  std::int64_t allocations_ = 0;
};

// A counted, uninitialised host array. Movable, not copyable.
template <class T>
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(MemoryMeter& meter, std::size_t count) : meter_(&meter), count_(count) {
    if (count > SIZE_MAX / sizeof(T) / 2) throw OutOfMemory(std::to_string(count) + " elements overflow size_t");
    meter.on_alloc(static_cast<std::int64_t>(bytes()));
    try {
      data_.reset(new T[count]);
    } catch (const std::bad_alloc&) {
      meter.on_free(static_cast<std::int64_t>(bytes()));
      throw OutOfMemory("host allocation of " + std::to_string(bytes()) + " bytes failed");
    }
  }
  HostBuffer(HostBuffer&& o) noexcept { swap(o); }
  HostBuffer& operator=(HostBuffer&& o) noexcept {
    HostBuffer tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  ~HostBuffer() {
    if (meter_ && data_) meter_->on_free(static_cast<std::int64_t>(bytes()));
  }

  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }
  T& operator[](std::size_t i) { return data_[i]; }
  const T& operator[](std::size_t i) const { return data_[i]; }

 private:
  void swap(HostBuffer& o) noexcept {
    std::swap(meter_, o.meter_);
    std::swap(count_, o.count_);
    std::swap(data_, o.data_);
  }
  MemoryMeter* meter_ = nullptr;
  std::size_t count_ = 0;
  std::unique_ptr<T[]> data_;
};

// "1.5 GiB", "12.0 KiB": for tables and charts.
std::string format_bytes(double bytes);

}  // namespace fa
