// The main of the GPU exercises' checks: without a CUDA device it prints why and returns 77 (CTest:
// skipped), else it runs the checks with the exercise reporter (common/tests/exercise_main.cpp).
#include <cstdio>

#include "fa/cuda/device.cuh"
#include "fa/exercise.hpp"

int main(int argc, char** argv) {
  const std::string reason = fa::cuda_skip_reason();
  if (!reason.empty()) {
    std::printf("skipped: %s\n", reason.c_str());
    return 77;
  }
  return fa::run_exercise_checks(argc, argv);
}
