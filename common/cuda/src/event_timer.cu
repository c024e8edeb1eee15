#include "fa/cuda/event_timer.cuh"

#include "fa/cuda/check.cuh"

namespace fa {

namespace {

// Reads n 16-byte words (zeros) through L2, evicting what it held; the sum's store never happens
// but keeps the loads from being removed.
__global__ void read_through_l2(const int4* words, std::size_t n, int* never) {
  int sum = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const int4 w = __ldcg(words + i);
    sum += w.x + w.y + w.z + w.w;
  }
  if (sum == 0x5eed1e55) *never = sum;
}

}  // namespace

TimingStats time_device(const std::function<void(cudaStream_t)>& fn, cudaStream_t stream, int warmup, int reps,
                        bool flush_l2) {
  void* flush = nullptr;
  std::size_t flush_bytes = 0;
  if (flush_l2) {
    int device = 0, l2 = 0;
    FA_CUDA_CHECK(cudaGetDevice(&device));
    FA_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
    flush_bytes = 2 * static_cast<std::size_t>(l2);
    if (cudaMalloc(&flush, flush_bytes) != cudaSuccess) {  // no room to flush: time without it
      cudaGetLastError();
      flush = nullptr;
    } else {
      FA_CUDA_CHECK(cudaMemsetAsync(flush, 0, flush_bytes, stream));
    }
  }
  for (int i = 0; i < warmup; ++i) fn(stream);
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));

  std::vector<cudaEvent_t> starts(static_cast<std::size_t>(reps)), stops(static_cast<std::size_t>(reps));
  for (int i = 0; i < reps; ++i) {
    FA_CUDA_CHECK(cudaEventCreate(&starts[i]));
    FA_CUDA_CHECK(cudaEventCreate(&stops[i]));
  }
  for (int i = 0; i < reps; ++i) {
    if (flush) {
      read_through_l2<<<1024, 256, 0, stream>>>(static_cast<const int4*>(flush), flush_bytes / 16,
                                                static_cast<int*>(flush));
      FA_CUDA_CHECK(cudaGetLastError());
    }
    FA_CUDA_CHECK(cudaEventRecord(starts[i], stream));
    fn(stream);
    FA_CUDA_CHECK(cudaEventRecord(stops[i], stream));
  }
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> samples;
  for (int i = 0; i < reps; ++i) {
    float ms = 0.0f;
    FA_CUDA_CHECK(cudaEventElapsedTime(&ms, starts[i], stops[i]));
    samples.push_back(ms);
    cudaEventDestroy(starts[i]);
    cudaEventDestroy(stops[i]);
  }
  if (flush) cudaFree(flush);
  return summarize_ms(std::move(samples));
}

KernelSplit::~KernelSplit() {
  for (auto& p : pending_) {
    cudaEventDestroy(p.start);
    cudaEventDestroy(p.stop);
  }
}

void KernelSplit::begin(const std::string& name, cudaStream_t stream) {
  Pair p{name, nullptr, nullptr};
  FA_CUDA_CHECK(cudaEventCreate(&p.start));
  FA_CUDA_CHECK(cudaEventCreate(&p.stop));
  FA_CUDA_CHECK(cudaEventRecord(p.start, stream));
  pending_.push_back(p);
}

void KernelSplit::end(const std::string& name, cudaStream_t stream) {
  for (auto it = pending_.rbegin(); it != pending_.rend(); ++it)
    if (it->name == name) {
      FA_CUDA_CHECK(cudaEventRecord(it->stop, stream));
      return;
    }
  throw std::logic_error("KernelSplit::end(" + name + ") without begin");
}

void KernelSplit::collect() {
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  for (auto& p : pending_) {
    float ms = 0.0f;
    FA_CUDA_CHECK(cudaEventElapsedTime(&ms, p.start, p.stop));
    samples_[p.name].push_back(ms);
    cudaEventDestroy(p.start);
    cudaEventDestroy(p.stop);
  }
  pending_.clear();
}

std::map<std::string, double> KernelSplit::median_ms() const {
  std::map<std::string, double> out;
  for (const auto& [name, s] : samples_) out[name] = summarize_ms(s).median_ms;
  return out;
}

}  // namespace fa
