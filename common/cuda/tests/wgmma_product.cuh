// wgmma_product.cuh — one warpgroup multiplies a 64 × K tile A by B with wgmma, both read from
// 128-byte swizzled shared-memory tiles through the matrix descriptors of
// <fa/cuda/hopper/smem_descriptor.cuh>: the product the wrappers' test (test_wgmma.cu) checks, and
// the one exercise ex09's checks run through the learner's descriptors (its folder comes first on
// the include path, so the kernel below is compiled with the learner's smem_descriptor.cuh).
//
// A (64 × K) is stored [64][K] or, with kTransA = 1, [K][64] (MN-major, as K is for dQᵀ = Kᵀ·dSᵀ
// in stage 10); B (K × N) is stored [N][K] (K-major, as K is for S = Q·Kᵀ) or, with kTransB = 1,
// [K][N] (MN-major, as V is for O = P·V). kRs: A from registers (ldmatrix), as P is.
#pragma once

#include <cuda/ptx>

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "fa/cuda/check.cuh"
#include "fa/cuda/device_buffer.cuh"
#include "fa/cuda/hopper/wgmma.cuh"
#include "fa/cuda/ptx/ldmatrix.cuh"
#include "fa/cuda/tc/tile_ops.cuh"

namespace fa::testing {

// The product of one configuration: kRs (A from registers), kTransB (B MN-major), kTransA (A
// MN-major, from shared memory).
template <class T, int N, int K, bool kRs, int kTransB, int kTransA>
__global__ void __launch_bounds__(128) wgmma_product_kernel(const T* a, const T* b, float* d) {
  static_assert(!(kRs && kTransA == 1), "an MN-major A is read from shared memory");
  static_assert(N != 80 || (kTransB == 0 && !kRs), "N = 80: A from shared memory, B K-major (stage 10's dQᵀ)");
  using ATile = std::conditional_t<kTransA == 1, tc::SwizzledTile<K, 64>, tc::SwizzledTile<64, K>>;
  using BTile = std::conditional_t<kTransB == 1, tc::SwizzledTile<K, N>, tc::SwizzledTile<N, K>>;
  __shared__ __align__(1024) T a_s[ATile::kElements];
  __shared__ __align__(1024) T b_s[BTile::kElements];
  constexpr int kBRows = kTransB == 1 ? K : N, kBCols = kTransB == 1 ? N : K;
  // Plain stores, 16 bytes at a time, into the swizzled places.
  constexpr int kACols = kTransA == 1 ? 64 : K;
  for (int c = threadIdx.x; c < 64 * K / 8; c += 128) {
    const int r = c / (kACols / 8), col = c % (kACols / 8) * 8;
    *reinterpret_cast<uint4*>(a_s + ATile::offset(r, col)) = *reinterpret_cast<const uint4*>(a + r * kACols + col);
  }
  for (int c = threadIdx.x; c < kBRows * kBCols / 8; c += 128) {
    const int r = c / (kBCols / 8), col = c % (kBCols / 8) * 8;
    *reinterpret_cast<uint4*>(b_s + BTile::offset(r, col)) = *reinterpret_cast<const uint4*>(b + r * kBCols + col);
  }
  cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);  // the stores, visible to the tensor cores
  __syncthreads();

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const auto a_addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(a_s));
  const auto b_addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(b_s));
  constexpr int kSteps = K / 16;
  std::uint32_t a_frag[kSteps][4];
  if constexpr (kRs) {  // mma.sync's A fragments of the warp's 16 rows, all k-steps, before the fence
    const std::uint32_t base = a_addr + sizeof(T) * ((lane % 16) * 64 + ((lane / 16) ^ (lane % 8)) * 8);
#pragma unroll
    for (int s = 0; s < kSteps; ++s) fa::ptx::ldmatrix_x4(a_frag[s], tc::swizzled_at<T>(base, s, warp, 64));
  }
  float acc[N / 8][4];
#pragma unroll
  for (int j = 0; j < N / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = NAN;  // scale_d = 0 at the first step must ignore these

  hopper::wgmma_fence();
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const std::uint64_t desc_b =
        kTransB == 1 ? hopper::mn_major_step<T>(b_addr, s, K) : hopper::k_major_step<T>(b_addr, s, N);
    const std::uint64_t desc_a =
        kTransA == 1 ? hopper::mn_major_step<T>(a_addr, s, K) : hopper::k_major_step<T>(a_addr, s, 64);
    if constexpr (kTransA == 1 || N == 80) {
      hopper::wgmma_ss<T, kTransB, N / 8, kTransA>(acc, desc_a, desc_b, s > 0);
    } else if constexpr (N == 64) {
      if constexpr (kRs) hopper::wgmma_m64n64k16_rs<T, kTransB>(acc, a_frag[s], desc_b, s > 0);
      else hopper::wgmma_m64n64k16_ss<T, kTransB>(acc, hopper::k_major_step<T>(a_addr, s, 64), desc_b, s > 0);
    } else if constexpr (N == 128) {
      if constexpr (kRs) hopper::wgmma_m64n128k16_rs<T, kTransB>(acc, a_frag[s], desc_b, s > 0);
      else hopper::wgmma_m64n128k16_ss<T, kTransB>(acc, hopper::k_major_step<T>(a_addr, s, 64), desc_b, s > 0);
    } else {
      static_assert(N == 256 && kRs && kTransB == 1, "n = 256: A from registers, B MN-major (P·V at D = 256)");
      hopper::wgmma_m64n256k16_rs<T, kTransB>(acc, a_frag[s], desc_b, s > 0);
    }
  }
  hopper::wgmma_commit();
  hopper::wgmma_wait<0>();
  hopper::fence_accumulators(acc);
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
    const int row = 16 * warp + g, col = 8 * j + 2 * t;
    d[row * N + col] = acc[j][0];
    d[row * N + col + 1] = acc[j][1];
    d[(row + 8) * N + col] = acc[j][2];
    d[(row + 8) * N + col + 1] = acc[j][3];
  }
}

// One thread computes a descriptor of each kind, so that a launcher can see a placeholder (0) from
// an unfinished exercise before any wgmma reads through it.
template <class T>
__global__ void wgmma_descriptor_probe_kernel(std::uint64_t* out) {
  out[0] = hopper::smem_descriptor(1024, 2048, 1024);
  out[1] = hopper::k_major_step<T>(0, 1, 64);
  out[2] = hopper::mn_major_step<T>(0, 1, 64);
}

// D = A·B on the current device, [64][N] float32. The output is NaN-poisoned and the accumulators
// start as NaN (the first k-step ignores them), so an element nobody writes, or a descriptor that
// points anywhere else, fails. A descriptor that is still 0 (an exercise's placeholder) is never
// handed to the tensor cores: D is returned as NaN.
template <class T, int N, int K, bool kRs, int kTransB, int kTransA = 0>
std::vector<float> run_wgmma_product(const std::vector<T>& a, const std::vector<T>& b) {
  MemoryMeter meter;
  DeviceBuffer<std::uint64_t> probe(meter, 3);
  wgmma_descriptor_probe_kernel<T><<<1, 1>>>(probe.data());
  FA_CUDA_CHECK_LAUNCH();
  std::vector<std::uint64_t> descriptors(3);
  probe.download(descriptors.data(), descriptors.size());
  std::vector<float> d(static_cast<std::size_t>(64 * N), NAN);
  for (const std::uint64_t x : descriptors)
    if (x == 0) return d;
  DeviceBuffer<T> a_d(meter, a.size()), b_d(meter, b.size());
  DeviceBuffer<float> d_d(meter, d.size());
  a_d.upload(a.data(), a.size());
  b_d.upload(b.data(), b.size());
  d_d.poison();
  wgmma_product_kernel<T, N, K, kRs, kTransB, kTransA><<<1, 128>>>(a_d.data(), b_d.data(), d_d.data());
  FA_CUDA_CHECK_LAUNCH();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  d_d.download(d.data(), d.size());
  return d;
}

}  // namespace fa::testing
