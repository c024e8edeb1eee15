// stage_gpu.cuh — how a GPU stage plugs into the common harness (fa/stage.hpp).
//
// A GPU stage's forward has the common shape, with device pointers and a DeviceContext:
//
//   void attention_forward(const Problem&, const AttentionInputs& (device), const AttentionOutputs& (device),
//                          DeviceContext&);
//
// gpu_variant() wraps it for the harness: uploads the inputs into counted device buffers, poisons
// the outputs with NaN, runs once (the verified run), measures memory (the meter's peak, and the
// driver's figure beside it), times it with CUDA events (warm-up, L2 flushed, median), times each
// kernel separately when the stage reports them, and downloads O and LSE.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <map>
#include <string>

#include "fa/cuda/device_buffer.cuh"
#include "fa/cuda/event_timer.cuh"
#include "fa/stage.hpp"

namespace fa {

struct DeviceContext {
  explicit DeviceContext(MemoryMeter& m, cudaStream_t s = nullptr) : meter(m), stream(s) {}
  MemoryMeter& meter;                      // counts every device allocation of the stage
  cudaStream_t stream = nullptr;
  KernelSplit* split = nullptr;            // when set, time each kernel (begin/end below)
  const Options* options = nullptr;        // the stage's CLI flags, if run from an executable
  std::map<std::string, double> counters;  // figures a stage reports (e.g. tiles skipped)

  // A device buffer that lives as long as the context: the timed repetitions reuse it instead of
  // calling cudaMalloc each time. Counted on the meter like any other allocation.
  void* scratch(const std::string& name, std::size_t bytes);
  template <class T>
  T* scratch_as(const std::string& name, std::size_t count) {
    return static_cast<T*>(scratch(name, count * sizeof(T)));
  }

  void kernel_begin(const char* name) {
    if (split) split->begin(name, stream);
  }
  void kernel_end(const char* name) {
    if (split) split->end(name, stream);
  }

 private:
  std::map<std::string, DeviceBuffer<std::byte>> scratch_;
};

using DeviceForward =
    std::function<void(const Problem&, const AttentionInputs&, const AttentionOutputs&, DeviceContext&)>;

Variant gpu_variant(std::string stage, std::string name, bool ours, DeviceForward fn, std::int64_t max_seq = 0);
// For references: upload, run, download; no timing.
ForwardFn gpu_forward(DeviceForward fn);

// The harness hooks of every GPU stage: skip without a device (exit 77), device metadata.
void use_gpu_defaults(StageDefinition& def);

}  // namespace fa
