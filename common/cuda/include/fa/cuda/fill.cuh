// fill.cuh — inputs for the tuning tools (step04_tune, step07_tune, step08_tune) without a host
// round trip: a hashed uniform, the same values on every run. The stages' own inputs come from the
// host (fa/random.hpp), seeded and verified; these only have to be finite and varied.
#pragma once

#include <cuda_runtime.h>

namespace fa {

// x[i] = mean + spread·(u_i − 1/2), u_i in [0, 1) a hash of i and seed, rounded to T.
template <class T>
__global__ void fill_hashed_uniform(T* x, long n, unsigned seed, float mean, float spread) {
  for (long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
    h ^= h >> 16, h *= 0x7feb352du, h ^= h >> 15, h *= 0x846ca68bu, h ^= h >> 16;
    x[i] = static_cast<T>(mean + spread * (static_cast<float>(h) / 4294967296.0f - 0.5f));
  }
}

}  // namespace fa
