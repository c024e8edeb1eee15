// Stage 09's wgmma wrappers (wgmma.cuh) against float64: one warpgroup multiplies a 64 × K tile A by
// B (N × K stored K-major, or K × N stored MN-major) from 128-byte swizzled shared-memory tiles, with
// A from shared memory (_ss) or from registers (_rs, loaded by ldmatrix), N = 64 and 128 (and 256
// with A from registers: P·V at D = 256), K = 64 and 128, fp16 and bf16. The accumulators start
// as NaN and the first k-step ignores them (scale_d = 0), so a descriptor, a layout or a scale
// that is wrong fails, and so does an output element that nobody writes (the output is
// NaN-poisoned). Needs compute capability 9.0 exactly (sm_90a code runs on no other GPU):
// elsewhere it prints why and exits 77.
#include <doctest/doctest.h>

#include <cuda/ptx>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "fa/cuda/tc/tile_ops.cuh"
#include "09_hopper/hopper.cuh"
#include "fa/cuda/hopper/wgmma.cuh"
#include "fa/cuda/check.cuh"
#include "fa/cuda/device_buffer.cuh"
#include "fa/cuda/dtype.cuh"
#include "fa/cuda/ptx/ldmatrix.cuh"

namespace {

using fa::tc::SwizzledTile;
using fa::tc::swizzled_at;
namespace s9 = fa::step09;
namespace hp = fa::hopper;  // the wrappers under test (common/cuda/include/fa/cuda/hopper/)

// The product of one configuration: kRs (A from registers), kTransB (B MN-major).
template <class T, int N, int K, bool kRs, int kTransB>
__global__ void __launch_bounds__(128) product_kernel(const T* a, const T* b, float* d) {
  using ATile = SwizzledTile<64, K>;
  using BTile = std::conditional_t<kTransB == 1, SwizzledTile<K, N>, SwizzledTile<N, K>>;
  __shared__ __align__(1024) T a_s[ATile::kElements];
  __shared__ __align__(1024) T b_s[BTile::kElements];
  constexpr int kBRows = kTransB == 1 ? K : N, kBCols = kTransB == 1 ? N : K;
  // Plain stores, 16 bytes at a time, into the swizzled places.
  for (int c = threadIdx.x; c < 64 * K / 8; c += 128) {
    const int r = c / (K / 8), col = c % (K / 8) * 8;
    *reinterpret_cast<uint4*>(a_s + ATile::offset(r, col)) = *reinterpret_cast<const uint4*>(a + r * K + col);
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
    for (int s = 0; s < kSteps; ++s) fa::ptx::ldmatrix_x4(a_frag[s], swizzled_at<T>(base, s, warp, 64));
  }
  float acc[N / 8][4];
#pragma unroll
  for (int j = 0; j < N / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = NAN;  // scale_d = 0 at the first step must ignore these

  hp::wgmma_fence();
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const std::uint64_t desc_b =
        kTransB == 1 ? hp::mn_major_step<T>(b_addr, s, K) : hp::k_major_step<T>(b_addr, s, N);
    if constexpr (N == 64) {
      if constexpr (kRs) hp::wgmma_m64n64k16_rs<T, kTransB>(acc, a_frag[s], desc_b, s > 0);
      else hp::wgmma_m64n64k16_ss<T, kTransB>(acc, hp::k_major_step<T>(a_addr, s, 64), desc_b, s > 0);
    } else if constexpr (N == 128) {
      if constexpr (kRs) hp::wgmma_m64n128k16_rs<T, kTransB>(acc, a_frag[s], desc_b, s > 0);
      else hp::wgmma_m64n128k16_ss<T, kTransB>(acc, hp::k_major_step<T>(a_addr, s, 64), desc_b, s > 0);
    } else {
      static_assert(N == 256 && kRs && kTransB == 1, "n = 256: A from registers, B MN-major (P·V at D = 256)");
      hp::wgmma_m64n256k16_rs<T, kTransB>(acc, a_frag[s], desc_b, s > 0);
    }
  }
  hp::wgmma_commit();
  hp::wgmma_wait<0>();
  hp::fence_accumulators(acc);
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
    const int row = 16 * warp + g, col = 8 * j + 2 * t;
    d[row * N + col] = acc[j][0];
    d[row * N + col + 1] = acc[j][1];
    d[(row + 8) * N + col] = acc[j][2];
    d[(row + 8) * N + col + 1] = acc[j][3];
  }
}

template <class T, int N, int K, bool kRs, int kTransB>
void check_product(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<T> a(64 * K), b(N * K);
  std::vector<double> a64(a.size()), b64(b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<T>(uniform(rng));
    a64[i] = static_cast<double>(static_cast<float>(a[i]));
  }
  for (std::size_t i = 0; i < b.size(); ++i) {
    b[i] = static_cast<T>(uniform(rng));
    b64[i] = static_cast<double>(static_cast<float>(b[i]));
  }
  fa::MemoryMeter meter;
  fa::DeviceBuffer<T> a_d(meter, a.size()), b_d(meter, b.size());
  fa::DeviceBuffer<float> d_d(meter, 64 * N);
  a_d.upload(a.data(), a.size());
  b_d.upload(b.data(), b.size());
  d_d.poison();
  product_kernel<T, N, K, kRs, kTransB><<<1, 128>>>(a_d.data(), b_d.data(), d_d.data());
  FA_CUDA_CHECK_LAUNCH();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> d(64 * N);
  d_d.download(d.data(), d.size());

  // B(k, n): stored [n][k] (K-major) or [k][n] (MN-major).
  auto b_at = [&](int k, int n) { return kTransB == 1 ? b64[k * N + n] : b64[n * K + k]; };
  int bad = 0;
  double worst = 0.0;
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < N; ++n) {
      double ref = 0.0, magnitude = 0.0;
      for (int k = 0; k < K; ++k) {
        ref += a64[m * K + k] * b_at(k, n);
        magnitude += std::fabs(a64[m * K + k] * b_at(k, n));
      }
      // float32 accumulation of exact 16-bit products: a few units of 2^-24 of the magnitude.
      const double err = std::fabs(static_cast<double>(d[m * N + n]) - ref), bound = 1e-5 * magnitude + 1e-6;
      if (!(err <= bound)) ++bad;  // NaN fails
      if (err > worst || std::isnan(err)) worst = err;
    }
  INFO("N = " << N << ", K = " << K << std::string(kRs ? ", A from registers" : ", A from shared memory")
              << std::string(kTransB == 1 ? ", B MN-major" : ", B K-major") << ": " << bad << " of " << 64 * N
              << " elements off, worst error " << worst);
  CHECK(bad == 0);
}

template <class T>
void check_all(std::uint64_t seed) {
  check_product<T, 64, 64, false, 0>(seed + 1);
  check_product<T, 64, 128, false, 0>(seed + 2);
  check_product<T, 128, 64, false, 0>(seed + 3);
  check_product<T, 128, 128, false, 0>(seed + 4);
  check_product<T, 64, 64, true, 0>(seed + 5);
  check_product<T, 128, 128, true, 0>(seed + 6);
  check_product<T, 64, 64, true, 1>(seed + 7);
  check_product<T, 64, 128, true, 1>(seed + 8);
  check_product<T, 128, 64, true, 1>(seed + 9);
  check_product<T, 128, 128, true, 1>(seed + 10);
  check_product<T, 128, 128, false, 1>(seed + 11);
  check_product<T, 256, 64, true, 1>(seed + 12);  // P·V of a 64-key tile at D = 256
}

}  // namespace

TEST_CASE("wgmma m64nNk16 from 128-byte swizzled tiles: bf16") {
  fa::step09::exit_skipped_unless_hopper();
  check_all<__nv_bfloat16>(900);
}

TEST_CASE("wgmma m64nNk16 from 128-byte swizzled tiles: fp16") {
  fa::step09::exit_skipped_unless_hopper();
  check_all<__half>(950);
}
