// report.cpp — what stage 03's executable adds to the harness: stage 02 on the CPU as a capped
// comparison, and the time split among the three kernels.
#include "report.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

#include "02_cpu_online_softmax/online_softmax.hpp"
#include "fa/chart.hpp"

namespace fa::step03 {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

// Stage 02 on the CPU is the comparison: one thread, ~1000x slower than the GPU. It runs with at
// most 3 timed repetitions (not the GPU's 20), only up to N = 1024 and 5 GFLOP per forward (a
// second or two), so the default run stays a matter of seconds.
constexpr double kCpuComparisonMaxFlops = 5e9;
Variant stage02_comparison() {
  fa::Variant v = fa::host_variant("02", "online", /*ours=*/false, fa::step02::attention_forward, /*max_seq=*/1024);
  v.run = [inner = v.run](const fa::Problem& p, const fa::AttentionData& in, fa::AttentionResult& out,
                          const fa::RunConfig& cfg) {
    if (p.flops_forward() > kCpuComparisonMaxFlops)  // the harness reports a UsageError as `skipped`
      throw fa::UsageError("more than " + fmt("%.0f", kCpuComparisonMaxFlops / 1e9) +
                           " GFLOP: too slow for the CPU comparison");
    fa::RunConfig c = cfg;
    c.warmup = 0;
    c.reps = std::min(cfg.reps, 3);
    return inner(p, in, out, c);
  };
  return v;
}

// The time split among the three kernels, from ResultRow::split_ms (each kernel timed alone
// between its own pair of events, medians): where the time of an unfused attention goes.
void print_kernel_split(std::ostream& os, const std::vector<fa::ResultRow>& rows) {
  fa::Table t;
  t.header = {"N (q x k)", "variant", "qk", "softmax", "pv", "softmax share", ""};
  for (const fa::ResultRow& r : rows) {
    if (r.status != fa::Status::ok || r.split_ms.empty()) continue;
    auto ms = [&](const char* k) {
      const auto it = r.split_ms.find(k);
      return it == r.split_ms.end() ? 0.0 : it->second;
    };
    const double qk = ms("qk"), sm = ms("softmax"), pv = ms("pv"), total = qk + sm + pv;
    if (total <= 0) continue;
    const std::string n = r.problem.seq_q == r.problem.seq_k
                              ? std::to_string(r.problem.seq_q)
                              : std::to_string(r.problem.seq_q) + "x" + std::to_string(r.problem.seq_k);
    // A 20-character bar: q = qk, s = softmax, p = pv, in proportion to their times.
    const int nq = static_cast<int>(20 * qk / total + 0.5), ns = static_cast<int>(20 * sm / total + 0.5);
    const int np = std::max(0, 20 - nq - ns);
    t.rows.push_back({n, r.stage + " " + r.variant, fa::format_value(qk, fa::ChartUnit::milliseconds),
                      fa::format_value(sm, fa::ChartUnit::milliseconds), fa::format_value(pv, fa::ChartUnit::milliseconds),
                      fmt("%.0f%%", 100 * sm / total),
                      std::string(nq, 'q') + std::string(ns, 's') + std::string(np, 'p')});
  }
  if (t.rows.empty()) return;
  os << "\ntime per kernel (median of each kernel timed alone; bar: q = QK^T, s = softmax, p = PV)\n";
  t.print(os);
}

}  // namespace fa::step03
