#include "fa/verify.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <new>
#include <ostream>
#include <utility>

#include "fa/packed.hpp"
#include "fa/parallel.hpp"
#include "fa/reference.hpp"

namespace fa {

bool Verification::ok() const {
  return !reports.empty() && std::all_of(reports.begin(), reports.end(), [](const CompareReport& r) { return r.ok(); });
}
double Verification::max_abs() const {
  double m = 0;
  for (const auto& r : reports) m = std::fmax(m, r.max_abs);
  return m;
}
double Verification::max_rel() const {
  double m = 0;
  for (const auto& r : reports) m = std::fmax(m, r.max_rel);
  return m;
}
double Verification::rel_frobenius() const {
  double m = 0;
  for (const auto& r : reports) m = std::fmax(m, r.rel_frobenius);
  return m;
}

void Verification::print(std::ostream& os) const {
  os << "      verified against " << against << ": " << (ok() ? "PASS" : "FAIL") << "\n";
  for (const CompareReport& r : reports) os << "        " << r.summary() << "\n";
  if (error_vs_plain > 0) {
    // Above the multiple, a passing row passed on the bound's floor (4u·max|ref| + 4u·|ref|, and
    // 2·√Nk·u32·max|ref| for a long sum): the plain implementation was almost exact there (one key,
    // say, or a lucky order of a million additions), not this one inexact.
    const bool on_floor = error_vs_plain > kPlainErrorMultiple && ok();
    char buf[160];
    std::snprintf(buf, sizeof buf, "        error / a plain implementation's error: %.2f (allowed: %.0f%s)\n",
                  error_vs_plain, kPlainErrorMultiple,
                  on_floor ? "; passed on the floor of the bound: the plain error is tiny here" : "");
    os << buf;
  }
}

Tolerance tolerance_from_plain(double plain_error, double max_abs_ref, DType output_dtype, std::int64_t summed_keys) {
  const double u = unit_roundoff(output_dtype);
  const double sum_floor = 2 * std::sqrt(static_cast<double>(summed_keys)) * unit_roundoff(DType::float32) * max_abs_ref;
  return {std::fmax(kPlainErrorMultiple * plain_error, sum_floor) + 4 * u * max_abs_ref, 4 * u};
}

Tolerance tolerance_for(Tolerance base, InputKind inputs) {
  if (inputs == InputKind::large_logits) return {base.atol * 10, base.rtol * 10};
  return base;
}

namespace {

struct Errors {
  double max_diff = 0, max_ref = 0;
  void add(double got, double ref) {
    if (!std::isfinite(ref)) return;  // -inf = -inf (an empty row) is exact
    max_ref = std::fmax(max_ref, std::fabs(ref));  // even where the plain row overflowed: the bound keeps its scale
    if (std::isfinite(got)) max_diff = std::fmax(max_diff, std::fabs(got - ref));
  }
};

double ratio(double error, double plain_error) { return plain_error > 0 ? error / plain_error : 0.0; }

}  // namespace

namespace {

// A packed batch, one sequence at a time (its own problem, fa/packed.hpp), every sequence's
// reports merged by name: the worst figures, the first bad element named with its sequence.
Verification verify_packed(const Problem& p, const AttentionData& in, const AttentionResult& got,
                           const VerifyPlan& plan, std::uint64_t seed) {
  Verification all;
  for (std::int64_t s = 0; s < p.batch; ++s) {
    Verification v = verify_forward(sequence_problem(p, s), sequence_inputs(p, in, s), sequence_result(p, got, s),
                                    plan, seed + static_cast<std::uint64_t>(s));
    for (CompareReport& r : v.reports) {
      if (r.bad > 0) r.first_bad_at = "sequence " + std::to_string(s) + ", " + r.first_bad_at;
      auto same = std::find_if(all.reports.begin(), all.reports.end(),
                               [&](const CompareReport& a) { return a.name == r.name; });
      if (same == all.reports.end()) all.reports.push_back(r);
      else *same = merge(*same, r);
    }
    all.error_vs_plain = std::max(all.error_vs_plain, v.error_vs_plain);
    if (s == 0) {
      all.how = "each of the " + std::to_string(p.batch) + " sequences alone (the first: " + v.how + ")";
      all.against = v.against + ", per sequence";
    }
  }
  return all;
}

}  // namespace

Verification verify_forward(const Problem& p, const AttentionData& in_any, const AttentionResult& got,
                            const VerifyPlan& plan, std::uint64_t seed) {
  if (p.packed()) return verify_packed(p, in_any, got, plan, seed);
  const bool full = p.flops_forward() <= plan.max_full_flops;
  const std::vector<RowId> rows = full ? all_rows(p) : sample_rows(p, plan.sampled_rows, seed);
  const std::int64_t D = p.dim;

  // The float64 and plain rows, in the order of `rows`, one head at a time: each row needs its
  // head's Q, K and V in float32, and a float32 copy of all of a long sequence's Q, K and V would
  // be larger than the inputs themselves.
  std::vector<double> ref_o(rows.size() * static_cast<std::size_t>(D)), ref_lse(rows.size());
  std::vector<float> plain_o(ref_o.size()), plain_lse(rows.size());
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<std::size_t>> by_head;
  for (std::size_t n = 0; n < rows.size(); ++n) by_head[{rows[n].b, rows[n].h}].push_back(n);
  Problem one = p;  // one head of p: batch 1, one query head reading one K/V head
  one.batch = one.heads = 1;
  one.heads_kv = 0;
  const std::int64_t group = p.heads / p.kv_heads();
  for (const auto& [head, which] : by_head) {
    const auto [b, h] = head;
    const AttentionData in{head_float32(in_any.q, b, h), head_float32(in_any.k, b, h / group),
                           head_float32(in_any.v, b, h / group), HostTensor()};
    // The head's rows on every core: each row is computed alone, so the figures do not depend on
    // the split (the same as one loop).
    parallel_ranges(
        static_cast<std::int64_t>(which.size()),
        [&](std::int64_t begin, std::int64_t end) {
          for (std::int64_t w = begin; w < end; ++w) {
            const std::size_t n = which[static_cast<std::size_t>(w)];
            const RowId r{0, 0, rows[n].i};
            reference_row_f64(one, in, r, &ref_o[n * D], &ref_lse[n]);
            plain_row(one, in, r, &plain_o[n * D], &plain_lse[n]);
          }
        },
        1, reference_rows_per_thread(p));
  }

  std::vector<float> got_o, got_lse;
  Errors plain_err_o, plain_err_lse;
  for (std::size_t n = 0; n < rows.size(); ++n) {
    const RowId& r = rows[n];
    const std::int64_t flat = (r.b * p.heads + r.h) * p.seq_q + r.i;
    for (std::int64_t d = 0; d < D; ++d) {
      got_o.push_back(got.o.get(flat * D + d));
      plain_err_o.add(plain_o[n * D + d], ref_o[n * D + d]);
    }
    got_lse.push_back(got.lse.get(flat));
    plain_err_lse.add(plain_lse[n], ref_lse[n]);
  }

  Verification v;
  const Tolerance tol_o = tolerance_from_plain(plain_err_o.max_diff, plain_err_o.max_ref, p.dtype, p.seq_k);
  const Tolerance tol_lse = tolerance_from_plain(plain_err_lse.max_diff, plain_err_lse.max_ref, DType::float32);
  // The compared rows are a gather of rows: name a failure by the row it came from.
  auto row_at = [&](std::int64_t k, std::int64_t width) {
    const RowId& r = rows[static_cast<std::size_t>(k / width)];
    return "b " + std::to_string(r.b) + ", h " + std::to_string(r.h) + ", row " + std::to_string(r.i) +
           (width > 1 ? ", column " + std::to_string(k % width) : "");
  };
  v.reports.push_back(compare("O", got_o, ref_o, tol_o, [&](std::int64_t k) { return row_at(k, D); }));
  v.reports.push_back(compare("LSE", got_lse, ref_lse, tol_lse, [&](std::int64_t k) { return row_at(k, 1); }));
  v.error_vs_plain = std::fmax(ratio(v.reports[0].max_abs, plain_err_o.max_diff),
                               ratio(v.reports[1].max_abs, plain_err_lse.max_diff));
  v.how = full ? "all rows" : std::to_string(rows.size()) + " sampled rows";
  v.against = "float64 (" + v.how + ")";

  // The previous stage on every row: both results are within the bound of the truth, so they are
  // within twice the bound of each other.
  if (plan.previous && p.flops_forward() <= plan.previous->max_flops) {
    try {
      AttentionResult before(p);
      plan.previous->forward(p, in_any, before);
      const Tolerance twice_o{2 * tol_o.atol, 2 * tol_o.rtol}, twice_lse{2 * tol_lse.atol, 2 * tol_lse.rtol};
      const std::vector<float> got_all_o = got.o.to_float(), before_o = before.o.to_float();
      v.reports.push_back(compare("O vs " + plan.previous->name, got_all_o, before_o, twice_o,
                                  index_in({p.batch, p.heads, p.seq_q, p.dim})));
      v.reports.push_back(compare("LSE vs " + plan.previous->name, got.lse.values(), before.lse.values(), twice_lse,
                                  index_in({p.batch, p.heads, p.seq_q})));
      v.against += ", " + plan.previous->name + " (all rows)";
    } catch (const std::bad_alloc&) {
      v.against += " (" + plan.previous->name + " does not fit at this size)";
    } catch (const UsageError& e) {
      // A problem the previous stage does not run (stage 05 at D = 256, from files given with
      // --load): the float64 rows stand alone, as where it does not fit.
      v.against += " (" + plan.previous->name + " does not run this problem: " + e.what() + ")";
    }
  }
  return v;
}

}  // namespace fa
