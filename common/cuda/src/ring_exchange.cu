// ring_exchange.cu — the two ways a hop moves a ring's buffers (see fa/cuda/peer/ring_exchange.cuh).
#include "fa/cuda/peer/ring_exchange.cuh"

#include <stdexcept>
#include <string>

#if defined(FA_HAVE_NCCL)
#include <nccl.h>
#endif

#include "fa/cuda/check.cuh"

namespace fa::peer {

DeviceScope::DeviceScope(int device) {
  FA_CUDA_CHECK(cudaGetDevice(&saved_));
  FA_CUDA_CHECK(cudaSetDevice(device));
}
DeviceScope::~DeviceScope() { cudaSetDevice(saved_); }

namespace {

#if defined(FA_HAVE_NCCL)
void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw std::runtime_error(std::string("NCCL: ") + what + ": " + ncclGetErrorString(r));
}

// The sends and receives of a hop in one group: NCCL matches each send with the next rank's receive
// and runs them as one step; one host thread may drive every rank this way.
class NcclExchange final : public Exchange {
 public:
  explicit NcclExchange(const std::vector<int>& devices) : devices_(devices), comms_(devices.size()) {
    nccl_check(ncclCommInitAll(comms_.data(), static_cast<int>(devices.size()), devices.data()), "ncclCommInitAll");
  }
  ~NcclExchange() override {
    // Finalize every communicator in one group (each waits for its peers), then free them.
    ncclGroupStart();
    for (ncclComm_t c : comms_) ncclCommFinalize(c);
    ncclGroupEnd();
    for (ncclComm_t c : comms_) ncclCommDestroy(c);
  }
  void hop(const std::vector<const void*>& send, const std::vector<std::size_t>& send_bytes,
           const std::vector<void*>& recv, const std::vector<std::size_t>& recv_bytes,
           const std::vector<cudaStream_t>& streams) override {
    const int P = static_cast<int>(devices_.size());
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < P; ++r) {
      nccl_check(ncclSend(send[r], send_bytes[r], ncclUint8, (r + 1) % P, comms_[r], streams[r]), "ncclSend");
      nccl_check(ncclRecv(recv[r], recv_bytes[r], ncclUint8, (r + P - 1) % P, comms_[r], streams[r]), "ncclRecv");
    }
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
  }

 private:
  std::vector<int> devices_;
  std::vector<ncclComm_t> comms_;
};
#endif

// The same hop with copies: rank r pulls its previous rank's buffer with cudaMemcpyPeerAsync on its
// own stream, after both ranks reached the hop (event `ready`), and r's stream moves on only once
// its next rank has pulled from r (event `copied`): the semantics of the NCCL group above.
class CopyExchange final : public Exchange {
 public:
  explicit CopyExchange(const std::vector<int>& devices) : devices_(devices) {
    const int P = static_cast<int>(devices_.size());
    for (int r = 0; r < P; ++r) {  // direct copies between different GPUs, where they can (else staged by the driver)
      const int to = devices_[r], from = devices_[(r + P - 1) % P];
      int can = 0;
      if (to != from && cudaDeviceCanAccessPeer(&can, to, from) == cudaSuccess && can) {
        DeviceScope on(to);
        const cudaError_t e = cudaDeviceEnablePeerAccess(from, 0);
        if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) FA_CUDA_CHECK(e);
        cudaGetLastError();  // "already enabled" is not an error here
      }
    }
    for (const int device : devices_) {
      DeviceScope on(device);
      cudaEvent_t ready = nullptr, copied = nullptr;
      FA_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
      FA_CUDA_CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
      ready_.push_back(ready);
      copied_.push_back(copied);
    }
  }
  ~CopyExchange() override {
    for (std::size_t r = 0; r < ready_.size(); ++r) {
      DeviceScope on(devices_[r]);
      cudaEventDestroy(ready_[r]);
      cudaEventDestroy(copied_[r]);
    }
  }
  void hop(const std::vector<const void*>& send, const std::vector<std::size_t>& send_bytes,
           const std::vector<void*>& recv, const std::vector<std::size_t>& recv_bytes,
           const std::vector<cudaStream_t>& streams) override {
    const int P = static_cast<int>(devices_.size());
    for (int r = 0; r < P; ++r)  // refused before anything is queued
      if (send_bytes[(r + P - 1) % P] != recv_bytes[r]) throw std::logic_error("ring exchange: a hop's send and receive sizes differ");
    for (int r = 0; r < P; ++r) {
      DeviceScope on(devices_[r]);
      FA_CUDA_CHECK(cudaEventRecord(ready_[r], streams[r]));
    }
    for (int r = 0; r < P; ++r) {
      const int prev = (r + P - 1) % P;
      DeviceScope on(devices_[r]);
      FA_CUDA_CHECK(cudaStreamWaitEvent(streams[r], ready_[prev], 0));
      FA_CUDA_CHECK(cudaMemcpyPeerAsync(recv[r], devices_[r], send[prev], devices_[prev], recv_bytes[r], streams[r]));
      FA_CUDA_CHECK(cudaEventRecord(copied_[r], streams[r]));
    }
    for (int r = 0; r < P; ++r) {
      DeviceScope on(devices_[r]);
      FA_CUDA_CHECK(cudaStreamWaitEvent(streams[r], copied_[(r + 1) % P], 0));
    }
  }

 private:
  std::vector<int> devices_;
  std::vector<cudaEvent_t> ready_, copied_;
};

}  // namespace

bool built_with_nccl() {
#if defined(FA_HAVE_NCCL)
  return true;
#else
  return false;
#endif
}

std::unique_ptr<Exchange> make_nccl_exchange(const std::vector<int>& devices) {
#if defined(FA_HAVE_NCCL)
  return std::make_unique<NcclExchange>(devices);
#else
  (void)devices;
  throw std::logic_error("ring exchange: built without NCCL (ask built_with_nccl() first)");
#endif
}

std::unique_ptr<Exchange> make_copy_exchange(const std::vector<int>& devices) {
  return std::make_unique<CopyExchange>(devices);
}

}  // namespace fa::peer
