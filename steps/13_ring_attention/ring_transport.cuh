// ring_transport.cuh — stage 13's hop: every rank of the ring passes a buffer to the next and
// receives the previous rank's, either through NCCL (one group of sends and receives, the real thing)
// or through cudaMemcpyPeerAsync, which also works when ranks share a GPU (the one-GPU tests).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <vector>

namespace fa::step13 {

// Makes `device` current for the scope; the caller's device comes back after.
class DeviceScope {
 public:
  explicit DeviceScope(int device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int saved_ = 0;
};

// One hop for every rank at once: rank r sends send[r] (send_bytes[r]) to r + 1 and receives
// recv_bytes[r] into recv[r] from r − 1, queued on streams[r]. When streams[r] moves past the hop,
// both its send and its receive are complete (so either buffer may be reused).
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual void hop(const std::vector<const void*>& send, const std::vector<std::size_t>& send_bytes,
                   const std::vector<void*>& recv, const std::vector<std::size_t>& recv_bytes,
                   const std::vector<cudaStream_t>& streams) = 0;
};

// The transports over the ranks' devices, rank r on devices[r]. NCCL needs distinct devices, and a
// build with NCCL (built_with_nccl(), ring_gpu.cuh): without, make_nccl_exchange throws
// std::logic_error (ring_refusal says so before a ring is built).
std::unique_ptr<Exchange> make_nccl_exchange(const std::vector<int>& devices);
std::unique_ptr<Exchange> make_copy_exchange(const std::vector<int>& devices);

}  // namespace fa::step13
