// step03_cuda_naive — runs stage 03's two variants (three hand-written kernels; cuBLAS GEMMs around
// the same softmax) over a short sweep beside stage 02 on the CPU, verifies them against stage 02
// (all rows while small, sampled rows beyond), charts memory and time, and prints the time split
// among the three kernels. Everything else lives in fa::run_stage (common/src/stage.cpp).
//
//   build/steps/03_cuda_naive/step03_cuda_naive                          the default sweep
//   build/steps/03_cuda_naive/step03_cuda_naive --batch 4 --heads 32 --seq 4096 --variant cublas
//   build/steps/03_cuda_naive/step03_cuda_naive --find-oom --batch 1 --heads 32 --dim 64 --sweep 1024 --reps 3 --warmup 1
//
// --find-oom: for the given B, H, D, doubles N from the first sweep size until the forward no
// longer fits in device memory (really allocating and running it), bisects to the largest N that
// fits, then runs the usual harness over the doublings that fit, that N and the first N that does
// not: memory against N up to the wall, with `oom` rows for the sizes past it.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "02_cpu_online_softmax/online_softmax.hpp"
#include "fa/chart.hpp"
#include "fa/cli.hpp"
#include "fa/cuda/device.cuh"
#include "fa/cuda/device_buffer.cuh"
#include "fa/cuda/stage_arch.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/stage.hpp"
#include "naive_attention.cuh"

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

struct OurVariant {
  const char* name;
  fa::DeviceForward forward;
};
const OurVariant kOurs[] = {{"naive", fa::step03::attention_forward_naive},
                            {"cublas", fa::step03::attention_forward_cublas}};

// Stage 02 on the CPU is the comparison: one thread, ~1000x slower than the GPU. It runs with at
// most 3 timed repetitions (not the GPU's 20), only up to N = 1024 and 5 GFLOP per forward (a
// second or two), so the default run stays a matter of seconds.
constexpr double kCpuComparisonMaxFlops = 5e9;
fa::Variant stage02_comparison() {
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
void print_split(std::ostream& os, const std::vector<fa::ResultRow>& rows) {
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

// ---- --find-oom ---------------------------------------------------------------------------------

// Allocates inputs and outputs for N and runs each forward once, as the harness would. True if
// all fit; fa::OutOfMemory (ours or cuBLAS's) means no. Anything else propagates.
bool fits(const fa::Problem& p, const std::vector<const OurVariant*>& variants, std::int64_t limit_bytes,
          std::int64_t& measured) {
  measured = 0;
  try {
    for (const OurVariant* v : variants) {
      fa::MemoryMeter meter(limit_bytes);  // 0: the device's memory is the only limit
      fa::DeviceTensor q(meter, fa::q_shape(p), p.dtype), k(meter, fa::kv_shape(p), p.dtype),
          vv(meter, fa::kv_shape(p), p.dtype), o(meter, fa::q_shape(p), p.dtype),
          lse(meter, fa::lse_shape(p), fa::DType::float32);
      for (auto* t : {&q, &k, &vv}) FA_CUDA_CHECK(cudaMemset(t->view().data, 0, t->bytes()));
      fa::DeviceContext ctx(meter);
      v->forward(p, {q.view(), k.view(), vv.view()}, {o.view(), lse.view()}, ctx);
      FA_CUDA_CHECK(cudaDeviceSynchronize());
      measured = std::max(measured, meter.peak());
    }
    return true;
  } catch (const fa::OutOfMemory&) {
    return false;
  }
}

// The search; returns the sweep for the harness. Prints each probe.
std::vector<std::int64_t> find_oom(const fa::RunOptions& opt, const std::vector<const OurVariant*>& variants) {
  fa::Problem p = opt.problem;
  const std::int64_t start = std::max<std::int64_t>(1, opt.sizes.front().second);
  constexpr std::int64_t kMaxN = std::int64_t{1} << 22;
  // --mem-limit-gb G makes the search (and the harness after it) treat G GiB as the device's size.
  const auto limit_bytes = static_cast<std::int64_t>(opt.mem_limit_gb * 1024.0 * 1024.0 * 1024.0);
  auto probe = [&](std::int64_t n) {
    p.seq_q = p.seq_k = n;
    std::int64_t bytes = 0;
    const bool ok = fits(p, variants, limit_bytes, bytes);
    std::cout << "   N = " << n << ": " << (ok ? "fits, measured peak " + fa::format_bytes(static_cast<double>(bytes))
                                              : std::string("out of memory"))
              << "\n";
    return ok;
  };
  std::cout << "== --find-oom: B=" << p.batch << " H=" << p.heads << " D=" << p.dim << ", doubling N from " << start
            << ", then bisecting (device memory "
            << fa::format_bytes(static_cast<double>(fa::query_device().total_memory))
            << (limit_bytes > 0 ? ", limited to " + fa::format_bytes(static_cast<double>(limit_bytes)) : std::string())
            << ")\n";
  std::vector<std::int64_t> fitting;
  std::int64_t ok_n = 0, bad_n = 0;
  for (std::int64_t n = start; n <= kMaxN; n *= 2) {
    if (probe(n)) {
      fitting.push_back(n);
      ok_n = n;
    } else {
      bad_n = n;
      break;
    }
  }
  if (bad_n == 0) {
    std::cout << "   everything up to N = " << kMaxN << " fits; no wall found\n";
    return fitting;
  }
  // Bisect (ok_n, bad_n) down to steps of 1/64 of ok_n, rounded to 64: a handful of probes.
  const std::int64_t resolution = std::max<std::int64_t>(64, (ok_n / 64) / 64 * 64);
  while (ok_n > 0 && bad_n - ok_n > resolution) {
    const std::int64_t mid = (ok_n + bad_n) / 2 / 64 * 64;
    if (mid <= ok_n || mid >= bad_n) break;
    (probe(mid) ? ok_n : bad_n) = mid;
  }
  std::cout << "== largest N that fits: " << (ok_n > 0 ? std::to_string(ok_n) : std::string("none"))
            << "; N = " << bad_n << " does not (within " << resolution << ")\n";
  std::set<std::int64_t> sweep(fitting.begin(), fitting.end());
  if (ok_n > 0) sweep.insert(ok_n);
  sweep.insert(bad_n);
  return {sweep.begin(), sweep.end()};
}

}  // namespace

int main(int argc, char** argv) {
  fa::CliSpec spec;
  spec.program = "step03_cuda_naive";
  spec.summary = "three CUDA kernels (QK^T, row softmax, PV), S and P in device memory; and cuBLAS GEMMs";
  spec.defaults.batch = 1;
  spec.defaults.heads = 8;
  spec.defaults.dim = 64;
  spec.default_sweep = {256, 512, 1024, 2048, 4096};
  // Any head dim: the tiled kernels guard the D axis like the others (tests: 8, 16, 32, 64, 100, 128).
  spec.variants = {"naive", "cublas"};
  spec.notes =
      "variants: naive (three hand-written kernels), cublas (cublasSgemmStridedBatched, FP32 math, no\n"
      "TF32, around the same softmax kernel). Stage 02 (CPU, one thread) runs beside them up to N = 1024.\n"
      "memory: S and P, B*H*Nq*Nk floats each, measured on the meter (cuBLAS: +32 MiB workspace).\n"
      "verification: float64 on all rows while small, sampled rows beyond; and stage 02 on every row\n"
      "up to 1.1e9 FLOPs.";
  fa::StageCli cli(spec);
  bool find = false;
  cli.app().add_flag("--find-oom", find,
                     "for the given B, H, D: the largest N that fits (doubling from the first sweep size, then "
                     "bisection), then the usual run over those sizes, with oom rows past the wall");
  if (const auto exit_code = cli.parse(argc, argv)) return *exit_code;
  fa::RunOptions& opt = cli.options();

  fa::StageDefinition def;
  def.id = "03";
  for (const OurVariant& v : kOurs) def.variants.push_back(fa::gpu_variant("03", v.name, /*ours=*/true, v.forward));
  def.variants.push_back(stage02_comparison());
  def.verify.previous = fa::PreviousStage{"02 online", fa::host_forward(fa::step02::attention_forward), 1.1e9};
  def.extra_report = print_split;
  fa::use_gpu_defaults(def, fa::kStageMinComputeCapability);

  // --find-oom: search first, then hand the sizes found to the harness as its sweep.
  if (find && def.skip_reason().empty()) {
    const CLI::App& app = cli.app();
    if (!opt.load_dir.empty() || app.count("--seq") + app.count("--seq-q") + app.count("--seq-k") > 0) {
      std::cerr << spec.program << ": error: --find-oom searches Nq = Nk from the first --sweep size; drop --load/--seq\n";
      return fa::kExitUsage;
    }
    std::vector<const OurVariant*> probed;
    for (const OurVariant& v : kOurs)
      if (opt.variant.empty() || opt.variant == v.name) probed.push_back(&v);
    try {
      const std::vector<std::int64_t> sweep = find_oom(opt, probed);
      opt.sizes.clear();
      for (std::int64_t n : sweep) opt.sizes.emplace_back(n, n);
    } catch (const std::exception& e) {
      std::cerr << spec.program << ": error: --find-oom: " << e.what() << "\n";
      return fa::kExitVerifyFailed;
    }
  }
  return fa::run_stage(cli, def);
}
