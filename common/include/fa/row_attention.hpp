// row_attention.hpp — one query row's attention over a range of keys, in float64, from its scores:
// what the checks of the merge exercises (ex11, ex13) cut into parts and compare the merge with.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace fa {

// The row's (O, LSE) over keys [begin, end), seeing only keys < visible: O normalized by the part's
// own sum, LSE = log Σ exp(score); O = 0 and LSE = −inf when it sees none of them.
struct RowPart {
  std::vector<double> o;
  double lse;
};
inline RowPart row_attention_f64(const std::vector<double>& scores, const std::vector<std::vector<double>>& v,
                                 int begin, int end, int visible) {
  const int d = static_cast<int>(v[0].size());
  const int last = std::min(end, visible);
  RowPart part{std::vector<double>(d, 0.0), -std::numeric_limits<double>::infinity()};
  double m = -std::numeric_limits<double>::infinity();
  for (int j = begin; j < last; ++j) m = std::max(m, scores[j]);
  if (m == -std::numeric_limits<double>::infinity()) return part;
  double l = 0.0;
  for (int j = begin; j < last; ++j) {
    const double p = std::exp(scores[j] - m);
    l += p;
    for (int c = 0; c < d; ++c) part.o[c] += p * v[j][c];
  }
  for (double& x : part.o) x /= l;
  part.lse = m + std::log(l);
  return part;
}

}  // namespace fa
