// backward_gpu.cuh — how a GPU backward stage plugs into the backward harness (fa/backward.hpp).
//
// A GPU backward has one shape (device pointers; the gradients are written completely):
//
//   void attention_backward(const Problem&, const AttentionInputs& in, const float* o, const float* lse,
//                           const float* d_o, const AttentionGradients& grads, DeviceContext&);
//
// gpu_backward_variant() pairs it with a forward: uploads Q, K, V, dO into counted buffers, runs
// the forward (O, LSE) and the backward once on NaN-poisoned O, LSE and gradients (the verified
// run), measures the meter's peak over forward+backward beyond inputs, outputs and gradients (the
// driver's figure beside it), times the backward alone with CUDA events (warm-up, L2 flushed,
// median) and each of its kernels when the stage marks them.
#pragma once

#include <functional>

#include "fa/backward.hpp"
#include "fa/cuda/stage_gpu.cuh"

namespace fa {

using DeviceBackward = std::function<void(const Problem&, const AttentionInputs&, const float* o, const float* lse,
                                          const float* d_o, const AttentionGradients&, DeviceContext&)>;

BackwardVariant gpu_backward_variant(std::string stage, std::string name, bool ours, DeviceForward forward,
                                     DeviceBackward backward, std::int64_t max_seq = 0);

// One forward+backward without timing, for tests: the result and the memory it took.
struct BackwardRun {
  BackwardResult out;
  std::int64_t io_bytes = 0;     // Q, K, V, dO, O, LSE, dQ, dK, dV
  std::int64_t extra_bytes = 0;  // the meter's peak beyond io_bytes over forward+backward
};
BackwardRun run_backward_once(const Problem& p, const BackwardData& data, const DeviceForward& forward,
                              const DeviceBackward& backward, const Options* options = nullptr);

// A DeviceForward that computes O and LSE on the host in float64 (reference_attention_f64) from
// `in` (which must be the inputs the forward is called with), rounds them to float32 and uploads
// them: it lets a backward be tested apart from any GPU forward.
DeviceForward float64_forward(const AttentionData& in);

// Skip without a device (exit 77), device metadata, GPU timing defaults.
void use_gpu_defaults(BackwardStageDefinition& def);

}  // namespace fa
