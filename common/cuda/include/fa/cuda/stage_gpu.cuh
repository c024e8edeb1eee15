// stage_gpu.cuh — how a GPU stage plugs into the common harness (fa/stage.hpp), forward or backward.
//
// A GPU stage's forward and backward have one shape each, device views and a DeviceContext:
//
//   void forward (const Problem&, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext&);
//   void backward(const Problem&, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse,
//                 ConstTensorView d_o, const AttentionGradients& grads, DeviceContext&);
//
// One device-side case type (DeviceCase) holds everything a case puts on the device, counted on
// the meter and poisoned; run_once() runs a case once (tests, references), gpu_variant() and
// gpu_backward_variant() run it for the harness: the verified run on poisoned buffers, memory
// (the meter's peak, the driver's figure beside it), CUDA-event timing (warm-up, L2 flushed,
// median) of the forward or of the backward, and each kernel's time where the stage marks them.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "fa/cuda/device_buffer.cuh"
#include "fa/cuda/dtype.cuh"
#include "fa/cuda/event_timer.cuh"
#include "fa/stage.hpp"

namespace fa {

struct DeviceContext {
  explicit DeviceContext(MemoryMeter& m, cudaStream_t s = nullptr) : meter(m), stream(s) {}
  MemoryMeter& meter;            // counts every device allocation of the stage
  cudaStream_t stream = nullptr;
  KernelSplit* split = nullptr;  // when set, time each kernel (begin/end below)

  // A device buffer that lives as long as the context: the timed repetitions reuse it instead of
  // calling cudaMalloc each time. Counted on the meter like any other allocation.
  void* scratch(const std::string& name, std::size_t bytes);
  template <class T>
  T* scratch_as(const std::string& name, std::size_t count) {
    if (count > SIZE_MAX / sizeof(T)) throw OutOfMemory(name + ": " + std::to_string(count) + " elements overflow size_t");
    return static_cast<T*>(scratch(name, count * sizeof(T)));
  }

  // The same, zeroed (on `stream`) when it is allocated and only then: for buffers that the kernels
  // leave as they found them, such as counters that the last block to use them sets back to 0.
  void* scratch_zeroed(const std::string& name, std::size_t bytes);
  template <class T>
  T* scratch_zeroed_as(const std::string& name, std::size_t count) {
    if (count > SIZE_MAX / sizeof(T)) throw OutOfMemory(name + ": " + std::to_string(count) + " elements overflow size_t");
    return static_cast<T*>(scratch_zeroed(name, count * sizeof(T)));
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
using DeviceBackward = std::function<void(const Problem&, const AttentionInputs&, ConstTensorView o, ConstTensorView lse,
                                          ConstTensorView d_o, const AttentionGradients&, DeviceContext&)>;

// A device tensor: a counted buffer with its dtype and shape.
class DeviceTensor {
 public:
  DeviceTensor() = default;
  DeviceTensor(MemoryMeter& meter, Shape4 shape, DType dtype);
  void upload(const HostTensor& t);
  void download(HostTensor& t) const;
  void poison() { buf_.poison(); }  // 0xFF bytes: NaN in every dtype
  TensorView view() { return {buf_.data(), dtype_, shape_}; }
  ConstTensorView view() const { return {buf_.data(), dtype_, shape_}; }
  std::size_t bytes() const { return buf_.bytes(); }

 private:
  DeviceBuffer<std::byte> buf_;
  Shape4 shape_;
  DType dtype_ = DType::float32;
};

// Everything one case puts on the device: Q, K, V uploaded; O, LSE poisoned; for a backward
// case also dO uploaded and dQ, dK, dV poisoned.
struct DeviceCase {
  DeviceCase(MemoryMeter& meter, const Problem& p, const AttentionData& in, Pass pass);
  DeviceTensor q, k, v, d_o, o, lse, dq, dk, dv;
  Pass pass;
  AttentionInputs inputs() const { return {q.view(), k.view(), v.view()}; }
  AttentionOutputs outputs() { return {o.view(), lse.view()}; }
  AttentionGradients gradients() { return {dq.view(), dk.view(), dv.view()}; }
  void download(AttentionResult& out) const;
};

// One case, once, without timing (tests, references): the result and the memory it took.
struct GpuRun {
  AttentionResult out;
  std::int64_t io_bytes = 0;     // the case's tensors
  std::int64_t extra_bytes = 0;  // the meter's peak beyond them
};
GpuRun run_once(const Problem& p, const AttentionData& in, const DeviceForward& forward,
                const DeviceBackward& backward = {});

Variant gpu_variant(std::string stage, std::string name, bool ours, DeviceForward forward, std::int64_t max_seq = 0);
Variant gpu_backward_variant(std::string stage, std::string name, bool ours, DeviceForward forward,
                             DeviceBackward backward, std::int64_t max_seq = 0);
// For references: upload, run, download; device out-of-memory is a std::bad_alloc (OutOfMemory).
ForwardFn gpu_forward(DeviceForward forward);

// A DeviceForward that writes the float64 reference's O and LSE (computed on the host from `in`,
// which must be the inputs it is called with): a backward can be tested apart from any GPU forward.
DeviceForward float64_forward(const AttentionData& in);

// The harness hooks of every GPU stage: skip (exit 77) without a device of at least
// `min_compute_capability` (e.g. 80 for 8.0; 0: any), device metadata, GPU timing defaults.
void use_gpu_defaults(StageDefinition& def, int min_compute_capability = 0);

}  // namespace fa
