// The main of the GPU exercises' checks: without a CUDA device it prints why and returns 77 (CTest:
// skipped), else it runs the checks with the exercise reporter (common/tests/exercise_main.cpp).
#include <cstdio>

#include "fa/cuda/device.cuh"
#include "fa/exercise.hpp"

int main(int argc, char** argv) {
  // 7.5: nothing in the course is built for an older GPU (CUDA 13's oldest target is sm_75), so
  // there it is a skip, like no device, not a failure to launch.
  const std::string reason = fa::cuda_skip_reason(75);
  if (!reason.empty()) {
    std::printf("skipped: %s\n", reason.c_str());
    return 77;
  }
  return fa::run_exercise_checks(argc, argv);
}
