// Exercise 09 — the checks of the matrix descriptors: six products by wgmma through your
// descriptors against float64, covering A by descriptor and from registers, B K-major and
// MN-major, one and two blocks of 64 columns along k and along n. The same file builds against the
// starter (exercises/) and the solution (solutions/). Needs a GPU of compute capability 9.0
// (exit 77, "skipped", without one).
//   cmake --build build --target check_ex09
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "09_hopper/hopper.cuh"
#include "descriptor_exercise.cuh"
#include "fa/compare.hpp"
#include "fa/random.hpp"

namespace {

using fa::ex09::ProductCase;

// Values exact in bf16: small integers over 8 (a product of two is exact in float32, and the sums
// of 128 of them are too), so the float64 reference is the exact answer and any misplaced element
// of A or B shows as an error of at least 1/64.
float exact_value(fa::Rng& rng) { return static_cast<float>(static_cast<int>(rng.uniform() * 17.0) - 8) / 8.0f; }

ProductCase random_case(int n, int k, bool a_in_registers, bool b_mn_major, std::uint64_t seed) {
  ProductCase c;
  c.n = n, c.k = k, c.a_in_registers = a_in_registers, c.b_mn_major = b_mn_major;
  fa::Rng rng(seed);
  c.a.resize(static_cast<std::size_t>(64 * k));
  c.b.resize(static_cast<std::size_t>(k * n));
  for (float& x : c.a) x = exact_value(rng);
  for (float& x : c.b) x = exact_value(rng);
  return c;
}

void check_case(const ProductCase& c, const std::string& what) {
  fa::step09::exit_skipped_unless_hopper();
  INFO(what << ": 64 × " << c.k << " by " << c.k << " × " << c.n
            << std::string(c.a_in_registers ? ", A from registers" : ", A by descriptor")
            << std::string(c.b_mn_major ? ", B MN-major [k][n]" : ", B K-major [n][k]"));
  const std::vector<float> got = fa::ex09::run_product(c);
  std::vector<double> want(static_cast<std::size_t>(64 * c.n), 0.0);
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < c.n; ++n)
      for (int k = 0; k < c.k; ++k) {
        const double b = c.b_mn_major ? c.b[static_cast<std::size_t>(k * c.n + n)]
                                      : c.b[static_cast<std::size_t>(n * c.k + k)];
        want[static_cast<std::size_t>(m * c.n + n)] += static_cast<double>(c.a[static_cast<std::size_t>(m * c.k + k)]) * b;
      }
  const auto where = [&](std::int64_t i) {
    return "row " + std::to_string(i / c.n) + ", column " + std::to_string(i % c.n);
  };
  // Exact inputs, exact products, sums of multiples of 1/64 below 2^7 in magnitude: exact in float32.
  const auto d = fa::compare("D", got, want, fa::Tolerance{1e-6, 0.0}, where);
  CHECK_MESSAGE(d.ok(), d.summary());
}

}  // namespace

TEST_CASE("ex09 — 64 × 64 by 64 × 64, A and B by descriptor, B K-major (S = Q·Kᵀ at D = 64)") {
  check_case(random_case(64, 64, false, false, 9001), "one column block");
}

TEST_CASE("ex09 — 64 × 128 by 128 × 128, by descriptor, K-major: k crosses into the second column block") {
  check_case(random_case(128, 128, false, false, 9002), "two column blocks along k");
}

TEST_CASE("ex09 — A from registers, B K-major, k = 128") {
  check_case(random_case(64, 128, true, false, 9003), "A in registers");
}

TEST_CASE("ex09 — A from registers, B MN-major (O += P·V at D = 64)") {
  check_case(random_case(64, 64, true, true, 9004), "B MN-major");
}

TEST_CASE("ex09 — B MN-major with n = 128: the leading offset between blocks of 64 columns (P·V at D = 128)") {
  check_case(random_case(128, 128, true, true, 9005), "B MN-major, two column blocks along n");
}

TEST_CASE("ex09 — A by descriptor, B MN-major, n = 128, k = 64") {
  check_case(random_case(128, 64, false, true, 9006), "A by descriptor, B MN-major");
}
