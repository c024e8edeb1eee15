// read_cache.cu — the plain read of the cache (see read_cache.cuh): one kernel, launched in one wave.
#include "11_decoding/lab/read_cache.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "11_decoding/inference.cuh"  // kSupports
#include "11_decoding/launch_attributes.cuh"
#include "fa/cuda/check.cuh"
#include "fa/cuda/ptx/grid_dependency.cuh"

namespace fa::step11 {
namespace {

using ptx::allow_next_grid;
using ptx::wait_for_previous_grid;

// A plain read of the cache, what a decoding step is measured against (variant read_cache): K and V
// read once, the bytes the roofline counts, and nothing computed. 16-byte loads, kInFlight of them
// issued before any is used, in one wave of as many blocks as fit (read_cache_only); the loads
// stream past L1 (__ldcs). The sum is stored only if it equals a constant it never does: without a
// use, the compiler would drop the loads. O is written as zeros and LSE as −inf, so that the
// outputs are defined (a few KiB at decode shapes).
template <class T>
__global__ void __launch_bounds__(512) read_cache_kernel(const int4* k, const int4* v, long long chunks, T* o,
                                                         long long o_elements, float* lse, long long rows) {
  constexpr int kInFlight = 8;
  allow_next_grid();  // in a stream of steps (read_cache with overlap_previous): reads first, ...
  const long long first = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  int sum = 0;
  for (long long i = first; i < 2 * chunks; i += kInFlight * stride) {  // K's chunks, then V's
    int4 w[kInFlight];
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) {
      const long long c = i + j * stride;
      w[j] = c < chunks ? __ldcs(k + c) : c < 2 * chunks ? __ldcs(v + (c - chunks)) : int4{0, 0, 0, 0};
    }
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) sum ^= w[j].x ^ w[j].y ^ w[j].z ^ w[j].w;
  }
  wait_for_previous_grid();  // ... writes after the previous grid (a no-op without the attribute)
  if (sum == 0x5eed1e55) lse[0] = static_cast<float>(sum);  // never (and overwritten below if it were)
  for (long long i = first; i < o_elements; i += stride) o[i] = static_cast<T>(0.0f);
  for (long long i = first; i < rows; i += stride) lse[i] = -INFINITY;
}

}  // namespace

void read_cache_only(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx) {
  read_cache(p, in, out, ctx, /*overlap_previous=*/false);
}

void read_cache(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx,
                bool overlap_previous) {
  p.require(kSupports);
  if (overlap_previous) require_overlap_support("stage 11 read_cache");
  const long long chunks = p.batch * p.kv_heads() * p.seq_k * p.dim * static_cast<long long>(size_of(p.dtype)) / 16;  // of K, of V
  const long long rows = p.batch * p.heads * p.seq_q;
  if (!aligned16(in.k.data) || !aligned16(in.v.data))
    throw UsageError("stage 11 read_cache: K and V must be 16-byte aligned (the kernel reads 16-byte chunks)");
  // As many blocks as the GPU holds at once, and no more (resident_blocks): at 43 registers a
  // thread, 2 blocks of 512 threads an SM, each thread with 8 loads (128 bytes) in flight, 128 KiB
  // an SM. A larger grid (a first version had 4 blocks an SM) runs its extra blocks as a second wave
  // after the first: two round trips to memory where one does.
  auto launch = [&]<class T>() {
    cudaLaunchAttribute overlap = overlapping_previous();
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(resident_blocks<read_cache_kernel<T>, 512, 0>()));
    config.blockDim = dim3(512);
    config.stream = ctx.stream;
    config.attrs = &overlap;
    config.numAttrs = overlap_previous ? 1 : 0;
    FA_CUDA_CHECK(cudaLaunchKernelEx(&config, read_cache_kernel<T>, static_cast<const int4*>(in.k.data),
                                     static_cast<const int4*>(in.v.data), chunks, out.o.as<T>(), rows * p.dim,
                                     out.lse.as<float>(), rows));
  };
  if (p.dtype == DType::float16) launch.template operator()<__half>();
  else launch.template operator()<__nv_bfloat16>();
  FA_CUDA_CHECK_LAUNCH();
}

}  // namespace fa::step11
