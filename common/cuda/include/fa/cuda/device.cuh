// device.cuh — what GPU we are on, and a clean skip when there is none.
#pragma once

#include <string>

#include "fa/results.hpp"

namespace fa {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int sm_count = 0;
  int compute_major = 0, compute_minor = 0;
  long long total_memory = 0;       // bytes
  long long l2_bytes = 0;
  long long shared_per_block_optin = 0;
  int sm_clock_khz = 0, memory_clock_khz = 0, memory_bus_bits = 0;
  std::string runtime_version, driver_version;  // "13.0"
};

// Empty when a CUDA device is usable and device 0 has at least `min_compute_capability`
// (major*10 + minor, 0: any; a stage passes kStageMinComputeCapability, fa/cuda/stage_arch.cuh);
// otherwise the reason, one line ("no CUDA device (...)", "needs a GPU of compute capability 9.0
// or newer; device 0 (NVIDIA A100-SXM4-80GB) is 8.0").
std::string cuda_skip_reason(int min_compute_capability = 0);

// For a GPU exercise's checks, before its first kernel: when cuda_skip_reason(min) is not empty,
// prints "skipped: <reason>" and exits 77 (CTest's and the course check's "skipped"). The checks'
// own main skips only below compute capability 7.5; a stage that needs more passes its minimum
// (fa::kStageMinComputeCapability), so that such a GPU skips rather than fail with "no kernel image".
void exit_skipped_below(int min_compute_capability);
bool cuda_device_available();

// Everything about one device: reads all its properties, about a millisecond. Not for a path that
// runs before every launch; there ask current_compute_capability, or keep the answer.
DeviceInfo query_device(int index = 0);
// The current device's compute capability, major*10 + minor, from two attribute reads: cheap enough
// to ask before every launch.
int current_compute_capability();
// The current device's number of SMs, one attribute read: for a launch sized to the GPU (a
// persistent grid, one wave of blocks).
int current_sm_count();
// RunMetadata for the results file: device name, versions, SMs, clocks, memory.
RunMetadata device_metadata(const std::string& command);

}  // namespace fa
