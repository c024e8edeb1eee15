// The CUDA device, asked from the host: whether there is one the stages can run on (and, if not,
// the one-line reason they print before exiting 77), its properties, and the results metadata.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "fa/cuda/check.cuh"
#include "fa/cuda/device.cuh"

namespace fa {

namespace {

std::string version_string(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

}  // namespace

std::string cuda_skip_reason(int min_compute_capability) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear it: nothing else will run
    // Without any NVIDIA driver the runtime answers "driver version is insufficient", which reads
    // like an old driver; cudaDriverGetVersion gives 0 when there is none at all.
    int driver = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) {
      return "no GPU (no NVIDIA driver on this machine)";
    }
    if (err == cudaErrorNoDevice) return "no GPU";
    if (err == cudaErrorInsufficientDriver) {
      int runtime = 0;
      cudaRuntimeGetVersion(&runtime);
      return "the NVIDIA driver (CUDA " + version_string(driver) + ") is older than this build's CUDA runtime (" +
             version_string(runtime) + "): update the driver";
    }
    return std::string("no usable GPU (") + cudaGetErrorString(err) + ")";
  }
  if (count == 0) return "no GPU";
  if (min_compute_capability <= 0) return "";
  // Device 0 is the one every stage runs on. Too old a device is a skip, like no device: the
  // kernels were built for newer architectures (fa_gpu_stage) and would not launch.
  cudaDeviceProp prop{};
  const cudaError_t prop_err = cudaGetDeviceProperties(&prop, 0);
  if (prop_err != cudaSuccess) {
    cudaGetLastError();
    return std::string("CUDA device 0 unusable (") + cudaGetErrorString(prop_err) + ")";
  }
  if (prop.major * 10 + prop.minor >= min_compute_capability) return "";
  return "needs a GPU of compute capability " + std::to_string(min_compute_capability / 10) + "." +
         std::to_string(min_compute_capability % 10) + " or newer; device 0 (" + prop.name + ") is " +
         std::to_string(prop.major) + "." + std::to_string(prop.minor);
}

bool cuda_device_available() { return cuda_skip_reason().empty(); }

void exit_skipped_below(int min_compute_capability) {
  const std::string reason = cuda_skip_reason(min_compute_capability);
  if (reason.empty()) return;
  std::printf("skipped: %s\n", reason.c_str());
  std::exit(77);
}

DeviceInfo query_device(int index) {
  DeviceInfo d;
  d.index = index;
  cudaDeviceProp prop{};
  FA_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  d.name = prop.name;
  d.sm_count = prop.multiProcessorCount;
  d.compute_major = prop.major;
  d.compute_minor = prop.minor;
  d.total_memory = static_cast<long long>(prop.totalGlobalMem);
  d.l2_bytes = prop.l2CacheSize;
  d.shared_per_block_optin = static_cast<long long>(prop.sharedMemPerBlockOptin);
  d.memory_bus_bits = prop.memoryBusWidth;
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&d.sm_clock_khz, cudaDevAttrClockRate, index));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&d.memory_clock_khz, cudaDevAttrMemoryClockRate, index));
  int runtime = 0, driver = 0;
  FA_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  FA_CUDA_CHECK(cudaDriverGetVersion(&driver));
  d.runtime_version = version_string(runtime);
  d.driver_version = version_string(driver);
  return d;
}

int current_compute_capability() {
  int device = 0, major = 0, minor = 0;
  FA_CUDA_CHECK(cudaGetDevice(&device));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major * 10 + minor;
}

int current_sm_count() {
  int device = 0, sms = 0;
  FA_CUDA_CHECK(cudaGetDevice(&device));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

RunMetadata device_metadata(const std::string& command) {
  RunMetadata m = host_metadata(command);
  const std::string host_cpu = m.device;
  if (!cuda_device_available()) return m;
  const DeviceInfo d = query_device(0);
  m.device = d.name;
  m.cuda_runtime = d.runtime_version;
  m.cuda_driver = d.driver_version;
  m.extra["sm_count"] = std::to_string(d.sm_count);
  m.extra["compute_capability"] = std::to_string(d.compute_major) + "." + std::to_string(d.compute_minor);
  m.extra["memory_bytes"] = std::to_string(d.total_memory);
  m.extra["l2_bytes"] = std::to_string(d.l2_bytes);
  m.extra["sm_clock_mhz"] = std::to_string(d.sm_clock_khz / 1000);
  m.extra["memory_clock_mhz"] = std::to_string(d.memory_clock_khz / 1000);
  m.extra["memory_bus_bits"] = std::to_string(d.memory_bus_bits);
  m.extra["host_cpu"] = host_cpu;
  return m;
}

}  // namespace fa
