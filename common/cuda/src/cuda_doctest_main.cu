// The doctest main of GPU test executables: without a CUDA device it prints why and returns 77,
// which CTest reports as skipped (SKIP_RETURN_CODE), never as passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "fa/cuda/device.cuh"

int main(int argc, char** argv) {
  // 7.5: nothing in the course is built for an older GPU (CUDA 13's oldest target is sm_75), so
  // there it is a skip, like no device, not a failure to launch.
  const std::string reason = fa::cuda_skip_reason(75);
  if (!reason.empty()) {
    std::printf("skipped: %s\n", reason.c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
