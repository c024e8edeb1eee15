// The wgmma wrappers (fa/cuda/hopper/wgmma.cuh, taught in stage 09) against float64: one warpgroup
// multiplies a 64 × K tile A by B (N × K stored K-major, or K × N stored MN-major) from 128-byte
// swizzled shared-memory tiles (wgmma_product.cuh), with A from shared memory (_ss) or from
// registers (_rs, loaded by ldmatrix), N = 64 and 128 (and 256 with A from registers: P·V at
// D = 256; 80 with both from shared memory: stage 10's query tiles of 80), K = 64 and 128, fp16 and
// bf16; A also MN-major (stored [K][64], read as its transpose: Kᵀ in stage 10's dQᵀ = Kᵀ·dSᵀ). The accumulators start as NaN and the first k-step
// ignores them (scale_d = 0), so a descriptor, a layout or a scale that is wrong fails, and so does
// an output element that nobody writes (the output is NaN-poisoned). Needs compute capability 9.0
// exactly (sm_90a code runs on no other GPU): elsewhere it prints why and exits 77.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "fa/cuda/dtype.cuh"
#include "sm90a_only.cuh"
#include "wgmma_product.cuh"

namespace {

template <class T, int N, int K, bool kRs, int kTransB, int kTransA = 0>
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
  const std::vector<float> d = fa::testing::run_wgmma_product<T, N, K, kRs, kTransB, kTransA>(a, b);

  // A(m, k): stored [m][k] (K-major) or [k][m] (MN-major); B(k, n): stored [n][k] (K-major) or
  // [k][n] (MN-major).
  auto a_at = [&](int m, int k) { return kTransA == 1 ? a64[k * 64 + m] : a64[m * K + k]; };
  auto b_at = [&](int k, int n) { return kTransB == 1 ? b64[k * N + n] : b64[n * K + k]; };
  int bad = 0;
  double worst = 0.0;
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < N; ++n) {
      double ref = 0.0, magnitude = 0.0;
      for (int k = 0; k < K; ++k) {
        ref += a_at(m, k) * b_at(k, n);
        magnitude += std::fabs(a_at(m, k) * b_at(k, n));
      }
      // float32 accumulation of exact 16-bit products: a few units of 2^-24 of the magnitude.
      const double err = std::fabs(static_cast<double>(d[m * N + n]) - ref), bound = 1e-5 * magnitude + 1e-6;
      if (!(err <= bound)) ++bad;  // NaN fails
      if (err > worst || std::isnan(err)) worst = err;
    }
  INFO("N = " << N << ", K = " << K
              << std::string(kRs ? ", A from registers" : kTransA == 1 ? ", A MN-major" : ", A from shared memory")
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
  check_product<T, 80, 64, false, 0>(seed + 13);     // Sᵀ = K·Qᵀ over query tiles of 80 (stage 10)
  check_product<T, 80, 128, false, 0, 1>(seed + 14);  // dQᵀ = Kᵀ·dSᵀ: A MN-major, N = 80
  check_product<T, 64, 128, false, 1, 1>(seed + 15);  // A and B both MN-major
}

}  // namespace

TEST_CASE("wgmma m64nNk16 from 128-byte swizzled tiles: bf16") {
  fa::testing::exit_skipped_unless_sm90a();
  check_all<__nv_bfloat16>(900);
}

TEST_CASE("wgmma m64nNk16 from 128-byte swizzled tiles: fp16") {
  fa::testing::exit_skipped_unless_sm90a();
  check_all<__half>(950);
}
