// parallel.hpp — the host's cores for the large host-side loops (drawing inputs, converting
// tensors): one range of a loop per thread. Only for loops whose iterations are independent and
// whose results do not depend on how the range is split.
#pragma once

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace fa {

// Calls body(begin, end) on consecutive ranges covering [0, n), each starting at a multiple of
// `align`, on up to hardware_concurrency() threads; on the calling thread alone below `serial_below`
// elements (a thread costs tens of microseconds).
template <class Body>
void parallel_ranges(std::int64_t n, Body body, std::int64_t align = 1, std::int64_t serial_below = 1 << 20) {
  const std::int64_t threads =
      std::min<std::int64_t>(std::max(1u, std::thread::hardware_concurrency()), std::max<std::int64_t>(n / (serial_below / 4 + 1), 1));
  if (n < serial_below || threads < 2) {
    if (n > 0) body(std::int64_t{0}, n);
    return;
  }
  const std::int64_t step = ((n + threads - 1) / threads + align - 1) / align * align;
  std::vector<std::jthread> pool;
  for (std::int64_t begin = step; begin < n; begin += step)
    pool.emplace_back([=, &body] { body(begin, std::min(begin + step, n)); });
  body(std::int64_t{0}, std::min(step, n));
}  // the jthreads join here

// The largest of range_max(begin, end) over the ranges parallel_ranges makes of [0, n) (0 for n = 0):
// a maximum, so the same whatever the split.
template <class RangeMax>
double parallel_max(std::int64_t n, RangeMax range_max, std::int64_t serial_below = 1 << 20) {
  std::mutex mutex;
  double m = 0;
  parallel_ranges(
      n,
      [&](std::int64_t begin, std::int64_t end) {
        const double mine = range_max(begin, end);
        const std::lock_guard<std::mutex> lock(mutex);
        m = std::max(m, mine);
      },
      1, serial_below);
  return m;
}

}  // namespace fa
