// stage_arch.cuh — the compute capability this stage needs at run time, for its main to pass to
// the harness: fa::cuda_skip_reason(fa::kStageMinComputeCapability) (fa/cuda/device.cuh).
//
// FA_MIN_COMPUTE_CAPABILITY (major*10 + minor: 80 for 8.0) comes from the stage's
// fa_gpu_stage(ARCHS ... MIN_CC ...) in its CMakeLists.txt (cmake/FlashCourse.cmake); without it,
// 0: any CUDA device. Plain C++, so that a stage's main.cpp can include it too.
#pragma once

namespace fa {

// Not `inline`: a const at namespace scope has internal linkage, so each translation unit keeps
// its own folder's value (stage 04's main links stage 03's library, built with another one).
#ifdef FA_MIN_COMPUTE_CAPABILITY
constexpr int kStageMinComputeCapability = FA_MIN_COMPUTE_CAPABILITY;
#else
constexpr int kStageMinComputeCapability = 0;
#endif

}  // namespace fa
