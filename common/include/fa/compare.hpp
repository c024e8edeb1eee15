// compare.hpp — the NaN-safe comparison and its full report.
//
// An element is good iff got == ref (this lets -inf match -inf in LSE) or
// |got - ref| <= atol + rtol * |ref|. Written that way, any NaN or unmatched Inf is bad: the
// comparison `fabs(a - b) > tol` that many harnesses use lets NaN through. Every bad element
// counts; the report never hides one behind a mean.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace fa {

struct Tolerance {
  double atol = 1e-5;
  double rtol = 1e-5;
};

// Tolerances that follow the arithmetic (see the course design).
inline constexpr Tolerance kFloat32Tol{2e-5, 2e-5};   // float32 against float32/float64
inline constexpr Tolerance kTf32Tol{1e-3, 1e-3};
inline constexpr Tolerance kHalfTol{2e-2, 2e-2};

struct CompareReport {
  std::string name;                 // "O", "LSE", "dQ", ...
  std::int64_t count = 0;           // elements compared
  std::int64_t bad = 0;             // elements outside tolerance (NaN and Inf included)
  double max_abs = 0.0;             // max |got - ref| over finite pairs
  double max_rel = 0.0;             // max |got - ref| / |ref| over finite pairs with ref != 0
  double rel_frobenius = 0.0;       // ||got - ref|| / ||ref|| over finite pairs
  std::int64_t first_bad = -1;      // flat index of the first bad element
  std::string first_bad_at;         // where it is, e.g. "b 0, h 1, row 5, column 3" (empty: "[flat]")
  double first_bad_got = 0.0, first_bad_ref = 0.0;
  Tolerance tol;

  bool ok() const { return bad == 0 && count > 0; }
  std::string summary() const;      // one line: verdict and all the figures
};

// Names the element at a flat index of the compared arrays, for the failure message.
using Locator = std::function<std::string(std::int64_t flat)>;

// The indices of a flat index in a row-major tensor of this shape, as the course names them:
// [N, M] "row i, column j"; [B, H, N] "b, h, row i"; [B, H, N, D] "b, h, row i, column d".
Locator index_in(std::vector<std::int64_t> shape);

CompareReport compare(std::string name, std::span<const float> got, std::span<const float> ref,
                      Tolerance tol, const Locator& where = {});
CompareReport compare(std::string name, std::span<const float> got, std::span<const double> ref,
                      Tolerance tol, const Locator& where = {});

// Merge two reports of the same quantity (for example over sampled rows).
CompareReport merge(const CompareReport& a, const CompareReport& b);

}  // namespace fa
