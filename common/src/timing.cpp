#include "fa/timing.hpp"

#include <algorithm>
#include <chrono>

namespace fa {

TimingStats summarize_ms(std::vector<double> samples_ms) {
  TimingStats s;
  if (samples_ms.empty()) return s;
  std::sort(samples_ms.begin(), samples_ms.end());
  const std::size_t n = samples_ms.size();
  s.median_ms = n % 2 ? samples_ms[n / 2] : 0.5 * (samples_ms[n / 2 - 1] + samples_ms[n / 2]);
  s.min_ms = samples_ms.front();
  s.max_ms = samples_ms.back();
  s.reps = static_cast<int>(n);
  return s;
}

TimingStats time_host(const std::function<void()>& fn, int warmup, int reps, double min_total_ms) {
  using clock = std::chrono::steady_clock;
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> samples;
  double total = 0.0;
  const int cap = std::max(reps, 1) * 10;
  while (static_cast<int>(samples.size()) < std::max(reps, 1) ||
         (total < min_total_ms && static_cast<int>(samples.size()) < cap)) {
    const auto t0 = clock::now();
    fn();
    const double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    samples.push_back(ms);
    total += ms;
  }
  return summarize_ms(std::move(samples));
}

}  // namespace fa
