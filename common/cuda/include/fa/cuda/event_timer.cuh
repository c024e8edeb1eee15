// event_timer.cuh — GPU timing with CUDA events: warm-up first, then the median of many runs.
//
// Before every timed run the L2 cache is flushed (a buffer twice its size read through it, outside
// the timed region), so that small problems are not timed out of a warm cache. Read, not written:
// a memset would leave L2 full of dirty lines, and a kernel that reads less than L2 holds (a
// decoding step: 32 MiB of cache) would pay for writing them back inside its timed region.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "fa/timing.hpp"

namespace fa {

TimingStats time_device(const std::function<void(cudaStream_t)>& fn, cudaStream_t stream, int warmup, int reps,
                        bool flush_l2 = true);

// Per-kernel times inside one forward: a stage records an event pair around each kernel when a
// KernelSplit is attached to its context; the harness reports the medians per kernel name.
class KernelSplit {
 public:
  ~KernelSplit();
  void begin(const std::string& name, cudaStream_t stream);
  void end(const std::string& name, cudaStream_t stream);
  void collect();  // synchronises, reads the pairs recorded since the last collect
  std::map<std::string, double> median_ms() const;

 private:
  struct Pair {
    std::string name;
    cudaEvent_t start, stop;
  };
  std::vector<Pair> pending_;
  std::map<std::string, std::vector<double>> samples_;
};

}  // namespace fa
