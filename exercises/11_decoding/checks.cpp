// Exercise 11 — the checks, in the order of the holes: merged_lse alone, part_weight alone, then
// attention over one row split into chunks (some empty, some fully masked), each chunk's (O_s,
// LSE_s) computed in float64, merged with the two functions, against float64 in one piece. The same
// file builds against the starter's split_merge.hpp (exercises/) and the solution's (solutions/).
//   cmake --build build --target check_ex11
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <split_merge.hpp>  // the hole: the starter's or the solution's, by the include path

#include "fa/compare.hpp"
#include "fa/random.hpp"
#include "fa/row_attention.hpp"

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::string column_of(std::int64_t c) { return "column " + std::to_string(c); }

}  // namespace

TEST_CASE("ex11:merged_lse — the log of the summed exponentials, without overflow, −inf for no keys") {
  using fa::step11::merged_lse;
  const float two_three[] = {std::log(2.0f), std::log(3.0f)};
  CHECK(merged_lse(two_three, 2, 1) == doctest::Approx(std::log(5.0f)).epsilon(1e-6));
  const float big[] = {1000.0f, 1000.0f, 990.0f};  // exp(1000) overflows float: shift by the max first
  CHECK(merged_lse(big, 3, 1) == doctest::Approx(1000.0 + std::log(2.0 + std::exp(-10.0))).epsilon(1e-6));
  const float with_empty[] = {-kInf, 2.5f, -kInf};  // an empty part adds nothing
  CHECK(merged_lse(with_empty, 3, 1) == 2.5f);
  const float all_empty[] = {-kInf, -kInf};
  CHECK(merged_lse(all_empty, 2, 1) == -kInf);
  const float strided[] = {std::log(2.0f), 99.0f, std::log(6.0f), 99.0f};  // stride 2: the 99s are another row's
  CHECK(merged_lse(strided, 2, 2) == doctest::Approx(std::log(8.0f)).epsilon(1e-6));
  CHECK(merged_lse(strided, 1, 2) == doctest::Approx(std::log(2.0f)).epsilon(1e-6));
  // Every part below about −87, where exp(LSE_s) underflows float to 0: a running maximum that
  // starts at 0 instead of −inf stays 0, every exp(LSE_s − 0) is 0, and the log of 0 is −inf.
  const float tiny[] = {-200.0f, -201.0f};
  CHECK(merged_lse(tiny, 2, 1) == doctest::Approx(-200.0 + std::log1p(std::exp(-1.0))).epsilon(1e-6));
  const float tiny_strided[] = {-100.0f, 5.0f, -95.0f, 5.0f, -90.5f, 5.0f};
  CHECK(merged_lse(tiny_strided, 3, 2) ==
        doctest::Approx(-90.5 + std::log(1.0 + std::exp(-4.5) + std::exp(-9.5))).epsilon(1e-6));
}

TEST_CASE("ex11:weight — each part's share of the row's sum; 0 for an empty part or a row without keys") {
  using fa::step11::part_weight;
  const float lse = std::log(5.0f);
  CHECK(part_weight(std::log(2.0f), lse) == doctest::Approx(0.4f).epsilon(1e-6));
  CHECK(part_weight(std::log(3.0f), lse) == doctest::Approx(0.6f).epsilon(1e-6));
  CHECK(part_weight(-kInf, lse) == 0.0f);
  CHECK(part_weight(-kInf, -kInf) == 0.0f);  // never NaN
}

TEST_CASE("attention split into chunks and merged equals attention in one piece (float64)") {
  // 1000 keys, D = 16, scores with a spread so that one chunk dominates some rows; chunks of
  // uneven sizes, one empty and, causal, later ones fully masked. The parts' LSEs sit `stride`
  // floats apart, as the stage stores them (the split index outermost), with another row's values
  // between them. Scores shifted by −120 with spread 1 put every part's LSE below −87, where exp(LSE)
  // is 0 in float.
  fa::Rng rng(1010);
  const int n = 1000, d = 16;
  std::vector<std::vector<double>> v(n, std::vector<double>(d));
  for (auto& row : v)
    for (double& x : row) x = rng.normal(0.3, 1.0);
  const std::vector<int> bounds = {0, 1, 250, 250, 517, 999, 1000};  // chunk s: [bounds[s], bounds[s+1])
  const int parts = static_cast<int>(bounds.size()) - 1;
  for (const int stride : {1, 3}) {
    for (const double shift : {0.0, -120.0}) {
      for (const int visible : {1000, 600, 1, 0}) {
        for (const double spread : {1.0, 30.0}) {
          std::vector<double> scores(n);
          for (double& s : scores) s = shift + rng.normal(0.0, spread);
          INFO("keys visible: " << visible << ", score spread " << spread << ", scores shifted by " << shift
                                << ", the parts' LSEs at stride " << stride);
          const fa::RowPart whole = fa::row_attention_f64(scores, v, 0, n, visible);
          std::vector<float> lse(parts * stride, 1e30f), o(parts * d);  // 1e30: another row's LSEs
          for (int s = 0; s < parts; ++s) {
            const fa::RowPart part = fa::row_attention_f64(scores, v, bounds[s], bounds[s + 1], visible);
            lse[s * stride] = static_cast<float>(part.lse);
            for (int c = 0; c < d; ++c) o[s * d + c] = static_cast<float>(part.o[c]);
          }
          const float merged = fa::step11::merged_lse(lse.data(), parts, stride);
          if (visible == 0) {
            CHECK(merged == -kInf);
          } else {
            CHECK(merged == doctest::Approx(whole.lse).epsilon(1e-6));
          }
          std::vector<float> out(d, 0.0f);
          for (int c = 0; c < d; ++c) {
            double sum = 0.0;
            for (int s = 0; s < parts; ++s) sum += fa::step11::part_weight(lse[s * stride], merged) * o[s * d + c];
            out[c] = static_cast<float>(sum);
          }
          const fa::CompareReport report = fa::compare("O", out, whole.o, fa::kFloat32Tol, column_of);
          CHECK_MESSAGE(report.ok(), report.summary());
        }
      }
    }
  }
}
