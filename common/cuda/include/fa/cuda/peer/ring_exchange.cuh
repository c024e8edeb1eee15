// ring_exchange.cuh — the hop of a ring of GPUs: every rank passes a buffer to the next rank and
// receives the previous rank's, either through NCCL (one group of sends and receives, the real
// thing, and what crosses hosts too) or through cudaMemcpyPeerAsync, which also works when ranks
// share a GPU (a ring of P ranks on one device, for tests). Taught by stage 13 (ring attention,
// docs/13_ring_attention.md), which moves its K/V blocks with it; any later ring reuses it.
//
// Link fa_cuda_peer. NCCL is optional at build time: built_with_nccl() says whether this build has it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <vector>

namespace fa::peer {

// Makes `device` current for the scope; the caller's device comes back after. A ring drives every
// rank's device from one host thread, so each call on a rank's stream runs inside one of these.
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
// both its send and its receive are complete (so either buffer may be reused). Rank r − 1's
// send_bytes must equal rank r's recv_bytes.
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual void hop(const std::vector<const void*>& send, const std::vector<std::size_t>& send_bytes,
                   const std::vector<void*>& recv, const std::vector<std::size_t>& recv_bytes,
                   const std::vector<cudaStream_t>& streams) = 0;
};

// True when this build found NCCL at configure time (cmake: FA_NCCL_ROOT, the CUDA Toolkit's, a
// system one, or the one PyTorch's wheels bring).
bool built_with_nccl();

// The transports over the ranks' devices, rank r on devices[r]. NCCL needs distinct devices and a
// build with NCCL: without it, make_nccl_exchange throws std::logic_error (a caller asks
// built_with_nccl() first and refuses in one line). Copies accept any devices, repeated or not.
std::unique_ptr<Exchange> make_nccl_exchange(const std::vector<int>& devices);
std::unique_ptr<Exchange> make_copy_exchange(const std::vector<int>& devices);

}  // namespace fa::peer
