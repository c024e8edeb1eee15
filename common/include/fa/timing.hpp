// timing.hpp — host timing with the steady clock: warm-up first, then the median of many runs.
// (GPU stages time with CUDA events instead: fa/cuda/event_timer.cuh.)
#pragma once

#include <functional>
#include <vector>

namespace fa {

struct TimingStats {
  double median_ms = 0.0;
  double min_ms = 0.0;
  double max_ms = 0.0;
  int reps = 0;
};

// Median, min and max of a set of samples in milliseconds.
TimingStats summarize_ms(std::vector<double> samples_ms);

// Runs `fn` `warmup` times untimed, then `reps` times timed; at least `reps` runs, and more until
// `min_total_ms` has passed (capped at 10x reps) so that very short runs still get a stable median.
TimingStats time_host(const std::function<void()>& fn, int warmup, int reps, double min_total_ms = 50.0);

}  // namespace fa
