// device_todo.cuh — how a starter's hole inside a kernel says "not done yet".
//
// Host code says it with FA_TODO, which throws (fa/exercise.hpp). A kernel cannot throw, so a
// hole in device code calls
//
//     fa::device_todo("ex03:row_max", "m = the max of S over the keys this row sees ...");
//
// The first thread to reach a hole writes "TODO(ex03:row_max) is not done yet: ..." to a device
// buffer; the kernel goes on with whatever the hole left (a starter leaves NaN or nothing, so the
// check fails). After each check the exercises' reporter reads the buffer back through the probe
// this header registers (fa::todo_probes), and names the hole as it names a host FA_TODO.
//
// Only a starter's hole includes this header. Its variables live in an unnamed namespace: one copy
// in each translation unit that includes it (the stage source that includes the hole), which is
// what whole-program CUDA compilation needs (a __device__ variable is seen only by its own unit).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "fa/exercise.hpp"

namespace fa {
namespace {

constexpr int kDeviceTodoChars = 512;
__device__ int device_todo_taken;                          // 0 until a thread reaches a hole
__device__ char device_todo_message[kDeviceTodoChars];     // the first hole's message

__device__ void device_todo_append(int& at, const char* text) {
  for (; *text != '\0' && at < kDeviceTodoChars - 1; ++text) device_todo_message[at++] = *text;
}

// Called by a starter's hole: records the first hole that any thread reaches.
[[maybe_unused]] __device__ void device_todo(const char* tag, const char* what) {
  if (atomicCAS(&device_todo_taken, 0, 1) != 0) return;
  int at = 0;
  device_todo_append(at, "TODO(");
  device_todo_append(at, tag);
  device_todo_append(at, ") is not done yet: ");
  device_todo_append(at, what);
  device_todo_message[at] = '\0';
  __threadfence();
}

// The probe: the message of the hole reached since the last call, then forgotten. A failed CUDA
// call (no device, a kernel that crashed) reads as "no hole": the check reports that error itself.
std::string read_device_todo() {
  int taken = 0;
  if (cudaDeviceSynchronize() != cudaSuccess ||
      cudaMemcpyFromSymbol(&taken, device_todo_taken, sizeof taken) != cudaSuccess || taken == 0)
    return {};
  char message[kDeviceTodoChars] = {};
  const int zero = 0;
  if (cudaMemcpyFromSymbol(message, device_todo_message, sizeof message) != cudaSuccess ||
      cudaMemcpyToSymbol(device_todo_taken, &zero, sizeof zero) != cudaSuccess)
    return {};
  return message;
}

[[maybe_unused]] const bool device_todo_probe_registered = (todo_probes().push_back(&read_device_todo), true);

}  // namespace
}  // namespace fa
