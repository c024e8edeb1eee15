// stage_arch.cuh — the compute capability this stage needs at run time, for its main to pass to
// the harness: fa::cuda_skip_reason(fa::kStageMinComputeCapability) (fa/cuda/device.cuh).
//
// FA_MIN_COMPUTE_CAPABILITY (major*10 + minor: 80 for 8.0) comes from the stage's
// fa_gpu_stage(ARCHS ... MIN_CC ...) in its CMakeLists.txt (cmake/FlashCourse.cmake); without it,
// 0: any CUDA device. Plain C++, so that a stage's main.cpp can include it too.
// Also the refusal of a problem this GPU cannot run (refuse_on_this_device, below).
#pragma once

#include <iostream>
#include <optional>
#include <string>

#include "fa/stage.hpp"

namespace fa {

// Not `inline`: a const at namespace scope has internal linkage, so each translation unit keeps
// its own folder's value (stage 04's main links stage 03's library, built with another one).
#ifdef FA_MIN_COMPUTE_CAPABILITY
constexpr int kStageMinComputeCapability = FA_MIN_COMPUTE_CAPABILITY;
#else
constexpr int kStageMinComputeCapability = 0;
#endif

// For a stage's main, after the CLI: a problem that this GPU cannot run although the stage
// supports it (a kernel's shared memory past what the device gives a block: stage 04 at D = 128 on
// Turing) is bad usage, like an unsupported D: `refusal` printed as one line, exit 2. nullopt
// when `refusal` is empty (the stage's device_refusal returns it).
inline std::optional<int> refuse_on_this_device(const std::string& program, const std::string& refusal) {
  if (refusal.empty()) return std::nullopt;
  std::cerr << program << ": error: " << refusal << "\n";
  return kExitUsage;
}

}  // namespace fa
