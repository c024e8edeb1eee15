// sm90a_only.cuh — for the tests of the Hopper wrappers (fa/cuda/hopper/) and exercise ex09, before
// their first kernel: code built for sm_90a runs on compute capability 9.0 exactly, so anywhere
// else they print "skipped: <why>" and exit 77 (CTest's skip).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "fa/cuda/device.cuh"

namespace fa::testing {

inline void exit_skipped_unless_sm90a() {
  std::string why = cuda_skip_reason(90);
  if (why.empty()) {
    const DeviceInfo d = query_device();
    if (d.compute_major != 9 || d.compute_minor != 0)
      why = "needs compute capability 9.0 (built for sm_90a, which runs there only); device 0 (" + d.name + ") is " +
            std::to_string(d.compute_major) + "." + std::to_string(d.compute_minor);
  }
  if (why.empty()) return;
  std::printf("skipped: %s\n", why.c_str());
  std::exit(77);
}

}  // namespace fa::testing
