// Exercise 09 — the checks of the matrix descriptors (your fa/cuda/hopper/smem_descriptor.cuh):
// six products by wgmma through your descriptors against float64, covering A by descriptor and from
// registers, B K-major and MN-major, one and two blocks of 64 columns along k and along n. The
// product is the course's own (common/cuda/tests/wgmma_product.cuh), built here with this folder
// first on the include path. Needs a GPU of compute capability 9.0 (exit 77, "skipped", without one).
//   ./course check ex09   (or cmake --build build --target check_ex09)
#include <doctest/doctest.h>

#include <cuda_bf16.h>

#include <cstdint>
#include <string>
#include <vector>

#include <fa/cuda/hopper/smem_descriptor.cuh>  // the hole: yours (exercises/) or the answer (solutions/)

#include "fa/compare.hpp"
#include "fa/random.hpp"
#include "sm90a_only.cuh"
#include "wgmma_product.cuh"

namespace {

// Values exact in bf16: small integers over 8 (a product of two is exact in float32, and the sums
// of 128 of them are too), so the float64 reference is the exact answer and any misplaced element
// of A or B shows as an error of at least 1/64.
float exact_value(fa::Rng& rng) { return static_cast<float>(static_cast<int>(rng.uniform() * 17.0) - 8) / 8.0f; }

// One product, 64 × K by K × N, B MN-major ([K][N]) or K-major ([N][K]), A by descriptor or from
// registers, against float64.
template <int N, int K, bool kRs, int kTransB>
void check_product(std::uint64_t seed, const std::string& what) {
  fa::testing::exit_skipped_unless_sm90a();
  INFO(what << ": 64 × " << K << " by " << K << " × " << N
            << std::string(kRs ? ", A from registers" : ", A by descriptor")
            << std::string(kTransB == 1 ? ", B MN-major [k][n]" : ", B K-major [n][k]"));
  fa::Rng rng(seed);
  std::vector<float> a(64 * K), b(K * N);
  for (float& x : a) x = exact_value(rng);
  for (float& x : b) x = exact_value(rng);
  std::vector<__nv_bfloat16> a16(a.begin(), a.end()), b16(b.begin(), b.end());
  const std::vector<float> got = fa::testing::run_wgmma_product<__nv_bfloat16, N, K, kRs, kTransB>(a16, b16);
  std::vector<double> want(64 * N, 0.0);
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k)
        want[m * N + n] += static_cast<double>(a[m * K + k]) * (kTransB == 1 ? b[k * N + n] : b[n * K + k]);
  const auto where = [](std::int64_t i) { return "row " + std::to_string(i / N) + ", column " + std::to_string(i % N); };
  // Exact inputs, exact products, sums of multiples of 1/64 below 2^7 in magnitude: exact in float32.
  const auto d = fa::compare("D", got, want, fa::Tolerance{1e-6, 0.0}, where);
  CHECK_MESSAGE(d.ok(), d.summary());
}

}  // namespace

TEST_CASE("ex09 — 64 × 64 by 64 × 64, A and B by descriptor, B K-major (S = Q·Kᵀ at D = 64)") {
  check_product<64, 64, false, 0>(9001, "one column block");
}

TEST_CASE("ex09 — 64 × 128 by 128 × 128, by descriptor, K-major: k crosses into the second column block") {
  check_product<128, 128, false, 0>(9002, "two column blocks along k");
}

TEST_CASE("ex09 — A from registers, B K-major, k = 128") { check_product<64, 128, true, 0>(9003, "A in registers"); }

TEST_CASE("ex09 — A from registers, B MN-major (O += P·V at D = 64)") {
  check_product<64, 64, true, 1>(9004, "B MN-major");
}

TEST_CASE("ex09 — B MN-major with n = 128: the leading offset between blocks of 64 columns (P·V at D = 128)") {
  check_product<128, 128, true, 1>(9005, "B MN-major, two column blocks along n");
}

TEST_CASE("ex09 — A by descriptor, B MN-major, n = 128, k = 64") {
  check_product<128, 64, false, 1>(9006, "A by descriptor, B MN-major");
}
