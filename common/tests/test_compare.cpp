#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "fa/compare.hpp"

using fa::compare;

TEST_CASE("equal arrays pass and report zero error") {
  std::vector<float> a{1, 2, 3}, b{1, 2, 3};
  const auto r = compare("O", a, b, fa::kFloat32Tol);
  CHECK(r.ok());
  CHECK(r.bad == 0);
  CHECK(r.max_abs == 0.0);
}

TEST_CASE("NaN fails, in either position") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> got{1, nan, 3}, ref{1, 2, 3};
  auto r = compare("O", got, ref, fa::kFloat32Tol);
  CHECK_FALSE(r.ok());
  CHECK(r.bad == 1);
  CHECK(r.first_bad == 1);
  r = compare("O", ref, got, fa::kFloat32Tol);
  CHECK_FALSE(r.ok());
  std::vector<float> both{nan};
  CHECK_FALSE(compare("O", both, both, fa::kFloat32Tol).ok());  // NaN never equals NaN
}

TEST_CASE("Inf fails unless it matches exactly; -inf LSE rows pass") {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> got{inf}, ref{1e30f};
  CHECK_FALSE(compare("O", got, ref, fa::kFloat32Tol).ok());
  std::vector<float> lse_got{-inf, 1.0f}, lse_ref{-inf, 1.0f};
  CHECK(compare("LSE", lse_got, lse_ref, fa::kFloat32Tol).ok());
  std::vector<float> wrong_sign{inf, 1.0f};
  CHECK_FALSE(compare("LSE", wrong_sign, lse_ref, fa::kFloat32Tol).ok());
}

TEST_CASE("one bad element among many is counted, not averaged away") {
  std::vector<float> got(10000, 1.0f), ref(10000, 1.0f);
  got[7777] = 1.01f;
  const auto r = compare("O", got, ref, fa::kFloat32Tol);
  CHECK_FALSE(r.ok());
  CHECK(r.bad == 1);
  CHECK(r.first_bad == 7777);
  CHECK(r.max_abs == doctest::Approx(0.01).epsilon(1e-3));
  CHECK(r.rel_frobenius < 1e-3);  // the mean-like figure is tiny: that is why it must not decide
}

TEST_CASE("tolerance is atol + rtol*|ref| against a float64 reference") {
  std::vector<float> got{1000.01f};
  std::vector<double> ref{1000.0};
  CHECK(compare("O", got, ref, {0.0, 2e-5}).ok());
  CHECK_FALSE(compare("O", got, ref, {0.0, 1e-6}).ok());
}

TEST_CASE("nothing compared is not a pass; sizes must match") {
  std::vector<float> none;
  CHECK_FALSE(compare("O", none, none, fa::kFloat32Tol).ok());
  std::vector<float> a{1}, b{1, 2};
  CHECK_THROWS(compare("O", a, b, fa::kFloat32Tol));
}

TEST_CASE("the summary names the first bad element") {
  std::vector<float> got{1, 5}, ref{1, 2};
  const auto r = compare("O", got, ref, fa::kFloat32Tol);
  CHECK(r.summary().find("FAIL") != std::string::npos);
  CHECK(r.summary().find("[1]") != std::string::npos);
}

TEST_CASE("with a shape, the summary names the first bad element by row and column") {
  std::vector<float> got(2 * 3 * 4 * 5, 1.0f), ref = got;
  got[((1 * 3 + 2) * 4 + 3) * 5 + 4] = 7.0f;  // b 1, h 2, row 3, column 4
  CHECK(compare("O", got, ref, fa::kFloat32Tol, fa::index_in({2, 3, 4, 5})).summary().find("(b 1, h 2, row 3, column 4)") !=
        std::string::npos);
  std::vector<float> s(6, 0.0f), s_ref = s;
  s[5] = 1.0f;  // row 1, column 2 of a 2 x 3 matrix
  CHECK(compare("S", s, s_ref, fa::kFloat32Tol, fa::index_in({2, 3})).summary().find("(row 1, column 2)") !=
        std::string::npos);
  std::vector<float> lse(2 * 3 * 4, 0.0f), lse_ref = lse;
  lse[(0 * 3 + 1) * 4 + 2] = 1.0f;
  CHECK(compare("LSE", lse, lse_ref, fa::kFloat32Tol, fa::index_in({2, 3, 4})).summary().find("(b 0, h 1, row 2)") !=
        std::string::npos);
}
