#include "fa/compare.hpp"

#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace fa {

namespace {

template <class Ref>
CompareReport compare_impl(std::string name, std::span<const float> got, std::span<const Ref> ref,
                           Tolerance tol, const Locator& where) {
  if (got.size() != ref.size())
    throw std::invalid_argument("compare " + name + ": sizes differ (" +
                                std::to_string(got.size()) + " vs " + std::to_string(ref.size()) + ")");
  CompareReport r;
  r.name = std::move(name);
  r.tol = tol;
  r.count = static_cast<std::int64_t>(got.size());
  double diff_sq = 0.0, ref_sq = 0.0;
  bool nonfinite_mismatch = false;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i];
    const double e = static_cast<double>(ref[i]);
    const double diff = std::fabs(g - e);
    // A non-finite value is good only when it matches exactly: an Inf reference would otherwise
    // make the tolerance itself infinite.
    const bool good = (g == e) || (std::isfinite(e) && diff <= tol.atol + tol.rtol * std::fabs(e));
    if (std::isfinite(g) && std::isfinite(e)) {
      if (diff > r.max_abs) r.max_abs = diff;
      if (e != 0.0 && diff / std::fabs(e) > r.max_rel) r.max_rel = diff / std::fabs(e);
      diff_sq += diff * diff;
      ref_sq += e * e;
    } else if (!(g == e)) {
      nonfinite_mismatch = true;
    }
    if (!good) {
      if (r.bad == 0) {
        r.first_bad = static_cast<std::int64_t>(i);
        if (where) r.first_bad_at = where(r.first_bad);
        r.first_bad_got = g;
        r.first_bad_ref = e;
      }
      ++r.bad;
    }
  }
  r.rel_frobenius = ref_sq > 0.0 ? std::sqrt(diff_sq / ref_sq) : std::sqrt(diff_sq);
  if (nonfinite_mismatch) {
    r.max_abs = INFINITY;
    r.rel_frobenius = INFINITY;
  }
  return r;
}

}  // namespace

Locator index_in(std::vector<std::int64_t> shape) {
  return [shape](std::int64_t flat) {
    const std::size_t rank = shape.size();
    std::vector<std::int64_t> index(rank);
    for (std::size_t k = rank; k-- > 0;) {
      index[k] = flat % shape[k];
      flat /= shape[k];
    }
    // The last axis is a column where there are two (a matrix) or four (B, H, rows, columns).
    const bool has_column = rank == 2 || rank == 4;
    const char* const kBatchHead[] = {"b ", "h "};
    std::string s;
    for (std::size_t k = 0; k < rank; ++k) {
      const std::size_t from_end = rank - k;  // 1 for the last axis
      const char* label = has_column && from_end == 1 ? "column "
                          : from_end == (has_column ? 2u : 1u) ? "row "
                          : k < 2 ? kBatchHead[k] : "";
      s += (k ? ", " : "") + std::string(label) + std::to_string(index[k]);
    }
    return s;
  };
}

CompareReport compare(std::string name, std::span<const float> got, std::span<const float> ref,
                      Tolerance tol, const Locator& where) {
  return compare_impl(std::move(name), got, ref, tol, where);
}

CompareReport compare(std::string name, std::span<const float> got, std::span<const double> ref,
                      Tolerance tol, const Locator& where) {
  return compare_impl(std::move(name), got, ref, tol, where);
}

CompareReport merge(const CompareReport& a, const CompareReport& b) {
  if (a.count == 0) return b;
  if (b.count == 0) return a;
  CompareReport r = a;
  r.count = a.count + b.count;
  r.bad = a.bad + b.bad;
  r.max_abs = std::fmax(a.max_abs, b.max_abs);
  r.max_rel = std::fmax(a.max_rel, b.max_rel);
  // Frobenius ratios do not add; keep the worse one (an upper bound on the merged ratio is not
  // available without the norms, and the worse block is what a reader needs to see).
  r.rel_frobenius = std::fmax(a.rel_frobenius, b.rel_frobenius);
  if (a.bad == 0 && b.bad > 0) {
    r.first_bad = a.count + b.first_bad;
    r.first_bad_at = b.first_bad_at;
    r.first_bad_got = b.first_bad_got;
    r.first_bad_ref = b.first_bad_ref;
  }
  return r;
}

std::string CompareReport::summary() const {
  char buf[400];
  if (ok()) {
    std::snprintf(buf, sizeof buf, "%-4s ok    max_abs %.2e  max_rel %.2e  rel_fro %.2e  (%lld elements, atol %.0e rtol %.0e)",
                  name.c_str(), max_abs, max_rel, rel_frobenius, static_cast<long long>(count),
                  tol.atol, tol.rtol);
  } else if (count == 0) {
    std::snprintf(buf, sizeof buf, "%-4s FAIL  nothing was compared", name.c_str());
  } else if (!std::isfinite(max_abs)) {
    // A NaN or Inf that the reference does not have: the error figures over the finite pairs
    // (max_rel 0 beside got nan) would read as "nearly right", so they are left out.
    std::snprintf(buf, sizeof buf,
                  "%-4s FAIL  %lld of %lld bad; first at %s: got %.6g, want %.6g; NaN or Inf where the reference has none (or the reverse)",
                  name.c_str(), static_cast<long long>(bad), static_cast<long long>(count),
                  (first_bad_at.empty() ? "[" + std::to_string(first_bad) + "]" : "(" + first_bad_at + ")").c_str(),
                  first_bad_got, first_bad_ref);
  } else {
    std::snprintf(buf, sizeof buf,
                  "%-4s FAIL  %lld of %lld bad; first at %s: got %.6g, want %.6g; max_abs %.2e max_rel %.2e rel_fro %.2e",
                  name.c_str(), static_cast<long long>(bad), static_cast<long long>(count),
                  (first_bad_at.empty() ? "[" + std::to_string(first_bad) + "]" : "(" + first_bad_at + ")").c_str(),
                  first_bad_got, first_bad_ref, max_abs, max_rel, rel_frobenius);
  }
  return buf;
}

}  // namespace fa
