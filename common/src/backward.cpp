#include "fa/backward.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <set>

#include "fa/chart.hpp"
#include "fa/npy.hpp"
#include "fa/random.hpp"

namespace fa {

namespace {

constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

BackwardData make_backward_inputs(const Problem& p, std::uint64_t seed, InputKind kind) {
  return {make_inputs(p, seed, kind), make_output_grad(p, seed)};
}

BackwardResult::BackwardResult(const Problem& p, float fill)
    : o(q_shape(p), fill), lse(lse_shape(p), fill), dq(q_shape(p), fill), dk(kv_shape(p), fill),
      dv(kv_shape(p), fill) {}

// ---------------------------------------------------------------------------------------------
// The float64 reference

MatrixD head_f64(const HostTensor& t, std::int64_t b, std::int64_t h) { return t.head(b, h).cast<double>(); }

void head_forward_f64(const Problem& p, const MatrixD& q, const MatrixD& k, const MatrixD& v, MatrixD& o,
                      VectorD& lse) {
  const std::int64_t nq = q.rows(), nk = k.rows();
  MatrixD s = (q * k.transpose()) * static_cast<double>(p.softmax_scale());
  o.setZero(nq, q.cols());
  lse.resize(nq);
  for (std::int64_t i = 0; i < nq; ++i) {
    const std::int64_t seen = std::min(p.keys_visible(i), nk);
    if (seen == 0) {
      lse[i] = -kInf;
      continue;
    }
    const double m = s.row(i).head(seen).maxCoeff();
    const double l = (s.row(i).head(seen).array() - m).exp().sum();
    lse[i] = m + std::log(l);
    for (std::int64_t j = 0; j < seen; ++j) o.row(i) += std::exp(s(i, j) - lse[i]) * v.row(j);
  }
}

std::vector<std::int64_t> all_rows(std::int64_t n) {
  std::vector<std::int64_t> r(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) r[static_cast<std::size_t>(i)] = i;
  return r;
}

HeadGradientsF64 head_backward_f64(const Problem& p, const MatrixD& q, const MatrixD& k, const MatrixD& v,
                                   const MatrixD& d_o, const std::vector<std::int64_t>& q_rows,
                                   const std::vector<std::int64_t>& k_rows) {
  const std::int64_t nq = q.rows(), nk = k.rows(), D = q.cols();
  const double scale = p.softmax_scale();
  HeadGradientsF64 g;
  // Pass 1, every query row in blocks: LSE_i, D_i = rowsum(dO ∘ O)_i and Σ_d |dO_id O_id|.
  VectorD lse(nq), delta(nq), delta_abs(nq);
  const std::int64_t block = 256;
  for (std::int64_t i0 = 0; i0 < nq; i0 += block) {
    const std::int64_t rows = std::min(block, nq - i0);
    MatrixD s = (q.middleRows(i0, rows) * k.transpose()) * scale;
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t seen = std::min(p.keys_visible(i0 + r), nk);
      if (seen == 0) {
        lse[i0 + r] = -kInf;
        s.row(r).setZero();
        continue;
      }
      g.max_abs_score = std::max(g.max_abs_score, s.row(r).head(seen).cwiseAbs().maxCoeff());
      const double m = s.row(r).head(seen).maxCoeff();
      lse[i0 + r] = m + std::log((s.row(r).head(seen).array() - m).exp().sum());
      s.row(r).head(seen) = (s.row(r).head(seen).array() - lse[i0 + r]).exp().matrix();
      s.row(r).tail(nk - seen).setZero();
    }
    const MatrixD o = s * v;  // P V
    delta.segment(i0, rows) = (o.array() * d_o.middleRows(i0, rows).array()).rowwise().sum().matrix();
    delta_abs.segment(i0, rows) = (o.array() * d_o.middleRows(i0, rows).array()).abs().rowwise().sum().matrix();
  }
  auto prob = [&](std::int64_t i, std::int64_t j, double s_ij) {
    return p.visible(i, j) && lse[i] > -kInf ? std::exp(s_ij - lse[i]) : 0.0;
  };
  const MatrixD abs_q = q.cwiseAbs(), abs_k = k.cwiseAbs(), abs_v = v.cwiseAbs(), abs_do = d_o.cwiseAbs();

  g.q_rows = q_rows;
  g.k_rows = k_rows;
  g.o.setZero(static_cast<std::int64_t>(q_rows.size()), D);
  g.dq.setZero(static_cast<std::int64_t>(q_rows.size()), D);
  g.lse.resize(static_cast<std::int64_t>(q_rows.size()));
  // Query rows: o_i = Σ_j P_ij v_j, dq_i = scale Σ_j P_ij (dP_ij − D_i) k_j.
  for (std::size_t n = 0; n < q_rows.size(); ++n) {
    const std::int64_t i = q_rows[n];
    const VectorD s = (k * q.row(i).transpose()) * scale;
    const VectorD dp = v * d_o.row(i).transpose();
    const VectorD dp_abs = abs_v * abs_do.row(i).transpose();
    VectorD pr(nk), ds(nk), pa(nk);
    for (std::int64_t j = 0; j < nk; ++j) {
      pr[j] = prob(i, j, s[j]);
      ds[j] = pr[j] * (dp[j] - delta[i]);
      pa[j] = pr[j] * (dp_abs[j] + delta_abs[i]);
    }
    const auto row = static_cast<std::int64_t>(n);
    g.o.row(row) = (v.transpose() * pr).transpose();
    g.dq.row(row) = (k.transpose() * ds).transpose() * scale;
    g.lse[row] = lse[i];
    g.bound_o = std::max(g.bound_o, (abs_v.transpose() * pr).maxCoeff());
    g.bound_dq = std::max(g.bound_dq, scale * (abs_k.transpose() * pa).maxCoeff());
  }
  // Key rows: dv_j = Σ_i P_ij dO_i, dk_j = scale Σ_i dS_ij q_i.
  g.dk.setZero(static_cast<std::int64_t>(k_rows.size()), D);
  g.dv.setZero(static_cast<std::int64_t>(k_rows.size()), D);
  for (std::size_t n = 0; n < k_rows.size(); ++n) {
    const std::int64_t j = k_rows[n];
    const VectorD s = (q * k.row(j).transpose()) * scale;
    const VectorD dp = d_o * v.row(j).transpose();
    const VectorD dp_abs = abs_do * abs_v.row(j).transpose();
    VectorD pr(nq), ds(nq), pa(nq);
    for (std::int64_t i = 0; i < nq; ++i) {
      pr[i] = prob(i, j, s[i]);
      ds[i] = pr[i] * (dp[i] - delta[i]);
      pa[i] = pr[i] * (dp_abs[i] + delta_abs[i]);
    }
    const auto row = static_cast<std::int64_t>(n);
    g.dv.row(row) = (d_o.transpose() * pr).transpose();
    g.dk.row(row) = (q.transpose() * ds).transpose() * scale;
    g.bound_dv = std::max(g.bound_dv, (abs_do.transpose() * pr).maxCoeff());
    g.bound_dk = std::max(g.bound_dk, scale * (abs_q.transpose() * pa).maxCoeff());
  }
  return g;
}

// ---------------------------------------------------------------------------------------------
// Verification

double backward_relative_tolerance(const Problem& p, double max_abs_score, double safety) {
  const double u = std::ldexp(1.0, -24);  // float32 unit roundoff
  const double n = static_cast<double>(std::max(p.seq_q, p.seq_k) + p.dim);
  return safety * u * (std::sqrt(n) + max_abs_score);
}

Tolerance gradient_tolerance(std::span<const double> ref, double rel) {
  double max_abs = 0.0;
  for (double r : ref)
    if (std::isfinite(r)) max_abs = std::max(max_abs, std::fabs(r));
  return {rel * max_abs, rel};
}

double BackwardVerification::max_abs() const {
  return std::max({o.max_abs, lse.max_abs, dq.max_abs, dk.max_abs, dv.max_abs});
}
double BackwardVerification::max_rel() const {
  return std::max({o.max_rel, lse.max_rel, dq.max_rel, dk.max_rel, dv.max_rel});
}
double BackwardVerification::rel_frobenius() const {
  return std::max({o.rel_frobenius, lse.rel_frobenius, dq.rel_frobenius, dk.rel_frobenius, dv.rel_frobenius});
}

namespace {

// Rows worth checking in one head of length n: both ends, the causal edge, and `count` random ones.
std::vector<std::int64_t> pick_rows(std::int64_t n, std::int64_t edge, int count, Rng& rng) {
  std::set<std::int64_t> picked{0, n - 1, std::clamp<std::int64_t>(edge, 0, n - 1)};
  for (int c = 0; c < count; ++c) picked.insert(static_cast<std::int64_t>(rng.uniform() * static_cast<double>(n)));
  return {picked.begin(), picked.end()};
}

void append_rows(std::vector<float>& dst, const HostTensor& t, std::int64_t b, std::int64_t h,
                 const std::vector<std::int64_t>& rows) {
  const std::int64_t D = t.shape().d;
  for (std::int64_t r : rows) {
    const float* src = t.data() + t.head_offset(b, h) + r * D;
    dst.insert(dst.end(), src, src + D);
  }
}
void append_matrix(std::vector<double>& dst, const MatrixD& m) {
  for (std::int64_t r = 0; r < m.rows(); ++r)
    for (std::int64_t c = 0; c < m.cols(); ++c) dst.push_back(m(r, c));
}

}  // namespace

BackwardVerification verify_backward(const Problem& p, const BackwardData& data, const BackwardResult& got, bool full,
                                     int sampled_rows, std::uint64_t seed, double safety) {
  std::vector<std::pair<std::int64_t, std::int64_t>> heads;
  if (full) {
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t h = 0; h < p.heads; ++h) heads.emplace_back(b, h);
  } else {
    heads.emplace_back(0, 0);
    if (p.heads_total() > 1) heads.emplace_back(p.batch - 1, p.heads - 1);
  }
  Rng rng(seed ^ 0xBAC4A2Dull);
  std::vector<float> g_o, g_lse, g_dq, g_dk, g_dv;
  std::vector<double> r_o, r_lse, r_dq, r_dk, r_dv;
  std::size_t q_count = 0, k_count = 0;
  double bound_o = 0, bound_dq = 0, bound_dk = 0, bound_dv = 0, max_abs_score = 0;
  for (const auto& [b, h] : heads) {
    // The causal rows that see the fewest keys, and the keys that the fewest queries see.
    const std::int64_t first_seeing_row = -p.causal_offset();
    const std::int64_t last_key_seen = p.seq_k - 1;
    const auto q_rows = full ? all_rows(p.seq_q) : pick_rows(p.seq_q, first_seeing_row, sampled_rows, rng);
    const auto k_rows = full ? all_rows(p.seq_k) : pick_rows(p.seq_k, last_key_seen, sampled_rows, rng);
    q_count = q_rows.size(), k_count = k_rows.size();
    const HeadGradientsF64 ref = head_backward_f64(p, head_f64(data.in.q, b, h), head_f64(data.in.k, b, h),
                                                   head_f64(data.in.v, b, h), head_f64(data.d_o, b, h), q_rows, k_rows);
    append_rows(g_o, got.o, b, h, q_rows);
    append_rows(g_dq, got.dq, b, h, q_rows);
    append_rows(g_dk, got.dk, b, h, k_rows);
    append_rows(g_dv, got.dv, b, h, k_rows);
    for (std::int64_t r : q_rows) g_lse.push_back(got.lse.data()[(b * p.heads + h) * p.seq_q + r]);
    append_matrix(r_o, ref.o);
    append_matrix(r_dq, ref.dq);
    append_matrix(r_dk, ref.dk);
    append_matrix(r_dv, ref.dv);
    for (std::int64_t n = 0; n < ref.lse.size(); ++n) r_lse.push_back(ref.lse[n]);
    bound_o = std::max(bound_o, ref.bound_o);
    bound_dq = std::max(bound_dq, ref.bound_dq);
    bound_dk = std::max(bound_dk, ref.bound_dk);
    bound_dv = std::max(bound_dv, ref.bound_dv);
    max_abs_score = std::max(max_abs_score, ref.max_abs_score);
  }
  const double rel = backward_relative_tolerance(p, max_abs_score, safety);
  BackwardVerification v;
  v.o = compare("O", g_o, r_o, Tolerance{rel * bound_o, rel});
  v.lse = compare("LSE", g_lse, r_lse, kFloat32Tol);
  v.dq = compare("dQ", g_dq, r_dq, Tolerance{rel * bound_dq, rel});
  v.dk = compare("dK", g_dk, r_dk, Tolerance{rel * bound_dk, rel});
  v.dv = compare("dV", g_dv, r_dv, Tolerance{rel * bound_dv, rel});
  v.how = full ? "all rows" : std::to_string(heads.size()) + " heads, " + std::to_string(q_count) + " query rows and " +
                                  std::to_string(k_count) + " key rows each";
  return v;
}

BackwardVerification compare_backward(const BackwardResult& got, const BackwardResult& ref, double grad_rel_tol) {
  auto widen = [](const HostTensor& t) { return std::vector<double>(t.values().begin(), t.values().end()); };
  BackwardVerification v;
  v.o = compare("O", got.o.values(), ref.o.values(), kFloat32Tol);
  v.lse = compare("LSE", got.lse.values(), ref.lse.values(), kFloat32Tol);
  const auto dq = widen(ref.dq), dk = widen(ref.dk), dv = widen(ref.dv);
  v.dq = compare("dQ", got.dq.values(), dq, gradient_tolerance(dq, grad_rel_tol));
  v.dk = compare("dK", got.dk.values(), dk, gradient_tolerance(dk, grad_rel_tol));
  v.dv = compare("dV", got.dv.values(), dv, gradient_tolerance(dv, grad_rel_tol));
  v.how = "all rows";
  return v;
}

// ---------------------------------------------------------------------------------------------
// Files

double bytes_backward_min(const Problem& p) {
  return 4.0 * (4.0 * static_cast<double>(p.q_elements()) + 4.0 * static_cast<double>(p.kv_elements()) +
                static_cast<double>(p.lse_elements()));
}

BackwardData load_backward_inputs(const std::string& dir, Problem& problem, std::uint64_t seed,
                                  bool* generated_do) {
  BackwardData d;
  d.in = load_inputs(dir, problem);
  const std::filesystem::path path = std::filesystem::path(dir) / "do.npy";
  if (generated_do) *generated_do = false;
  if (!std::filesystem::exists(path)) {
    d.d_o = make_output_grad(problem, seed);
    if (generated_do) *generated_do = true;
    return d;
  }
  d.d_o = read_npy_tensor(path.string());
  if (!(d.d_o.shape() == d.in.q.shape())) throw UsageError("--load: do.npy must have the shape of q.npy");
  return d;
}

void save_backward_outputs(const std::string& dir, const BackwardResult& out) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw UsageError("--save " + dir + ": " + ec.message());
  const std::filesystem::path base(dir);
  write_npy_tensor((base / "o.npy").string(), out.o);
  write_npy_lse((base / "lse.npy").string(), out.lse);
  write_npy_tensor((base / "dq.npy").string(), out.dq);
  write_npy_tensor((base / "dk.npy").string(), out.dk);
  write_npy_tensor((base / "dv.npy").string(), out.dv);
}

namespace {
void save_upstream_gradient(const std::string& dir, const HostTensor& d_o) {
  write_npy_tensor((std::filesystem::path(dir) / "do.npy").string(), d_o);
}
}  // namespace

// ---------------------------------------------------------------------------------------------
// The harness

namespace {

void print_verification(const BackwardVerification& v, const std::string& against) {
  std::cout << "      verified against " << against << " (" << v.how << "): " << (v.ok() ? "PASS" : "FAIL") << "\n";
  for (const CompareReport* r : {&v.dq, &v.dk, &v.dv, &v.o, &v.lse}) std::cout << "        " << r->summary() << "\n";
}

}  // namespace

int run_backward_stage(int argc, const char* const* argv, const BackwardStageDefinition& def) {
  const std::string program = def.cli.program;
  Options opt;
  try {
    opt = parse_cli(argc, argv, def.cli);
  } catch (const UsageError& e) {
    std::cerr << program << ": error: " << e.what() << "\n";
    return kExitUsage;
  }
  if (opt.help) {
    std::cout << usage(def.cli);
    return kExitOk;
  }
  const bool paper_shapes = opt.flag("--paper-shapes");
  if (paper_shapes && !opt.load_dir.empty()) {
    std::cerr << program << ": error: --paper-shapes and --load cannot be combined\n";
    return kExitUsage;
  }
  if (paper_shapes && (2048 % opt.problem.dim != 0)) {
    std::cerr << program << ": error: --paper-shapes needs D dividing 2048 (hidden size), not D = " << opt.problem.dim
              << "\n";
    return kExitUsage;
  }

  RunMetadata meta = def.metadata ? def.metadata(opt.command_line) : host_metadata(opt.command_line);
  RunConfig cfg;
  cfg.warmup = opt.warmup >= 0 ? opt.warmup : def.default_warmup;
  cfg.reps = opt.reps > 0 ? opt.reps : def.default_reps;
  cfg.mem_limit_bytes = static_cast<std::int64_t>(
      (opt.mem_limit_gb > 0 ? opt.mem_limit_gb : def.default_mem_limit_gb) * 1024.0 * 1024.0 * 1024.0);
  cfg.options = &opt;
  std::cout << "== " << program << " — " << def.cli.summary << "\n";

  BackwardData loaded;
  if (!opt.load_dir.empty()) {
    try {
      bool generated_do = false;
      loaded = load_backward_inputs(opt.load_dir, opt.problem, opt.seed, &generated_do);
      if (generated_do)
        std::cout << "   " << opt.load_dir << " has no do.npy: dO drawn with seed " << opt.seed
                  << " (saved as do.npy with --save)\n";
      if (!def.cli.dims.empty() &&
          std::find(def.cli.dims.begin(), def.cli.dims.end(), opt.problem.dim) == def.cli.dims.end())
        throw UsageError("--load: D = " + std::to_string(opt.problem.dim) + " is not supported by " + program);
    } catch (const UsageError& e) {
      std::cerr << program << ": error: " << e.what() << "\n";
      return kExitUsage;
    }
    opt.sizes = {{opt.problem.seq_q, opt.problem.seq_k}};
  }
  auto problem_of = [&](std::size_t c) {
    Problem p = opt.problem;
    p.seq_q = opt.sizes[c].first;
    p.seq_k = opt.sizes[c].second;
    if (paper_shapes) {  // batch·N = 16384 tokens, heads·D = 2048 (the FlashAttention papers' shapes)
      p.batch = std::max<std::int64_t>(1, 16384 / std::max(p.seq_q, p.seq_k));
      p.heads = 2048 / p.dim;
    }
    return p;
  };

  std::vector<ResultRow> rows;
  const std::string skip = def.skip_reason ? def.skip_reason() : std::string();
  if (!skip.empty()) {
    std::cout << "skipped: " << skip << "\n";
    for (std::size_t c = 0; c < opt.sizes.size(); ++c)
      for (const BackwardVariant& v : def.variants) {
        ResultRow r;
        r.stage = v.stage;
        r.variant = v.name;
        r.pass = "bwd";
        r.problem = problem_of(c);
        r.dtype = opt.dtype;
        r.status = Status::skipped;
        r.note = skip;
        rows.push_back(r);
      }
    if (!opt.json_path.empty() && !write_results(program, opt.json_path, def.id, meta, rows)) return kExitUsage;
    return kExitSkipped;
  }
  std::cout << "   on " << meta.device << (meta.cuda_runtime.empty() ? "" : ", CUDA " + meta.cuda_runtime)
            << "; timing the backward: " << cfg.warmup << " warm-up, median of " << cfg.reps << "+ runs\n";

  bool any_failed = false;
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t c = 0; c < opt.sizes.size(); ++c) {
    const Problem p = problem_of(c);
    const std::uint64_t seed = opt.seed + 7919 * c;
    BackwardData data;
    try {
      data = opt.load_dir.empty() ? make_backward_inputs(p, seed, opt.inputs) : std::move(loaded);
    } catch (const std::bad_alloc&) {
      std::cout << "\n-- case " << c + 1 << ": " << p.describe() << ": the host inputs do not fit, skipped\n";
      continue;
    }
    std::cout << "\n-- case " << c + 1 << " of " << opt.sizes.size() << ": " << p.describe() << ", "
              << (opt.load_dir.empty() ? std::string(to_string(opt.inputs)) + " inputs, seed " + std::to_string(seed)
                                       : "inputs from " + opt.load_dir)
              << "\n";
    bool saved = false;
    for (const BackwardVariant& v : def.variants) {
      if (!opt.variant.empty() && v.ours && v.name != opt.variant) continue;
      ResultRow r;
      r.stage = v.stage;
      r.variant = v.name;
      r.pass = "bwd";
      r.problem = p;
      r.dtype = opt.dtype;
      if (v.max_seq > 0 && std::max(p.seq_q, p.seq_k) > v.max_seq) {
        r.status = Status::skipped;
        r.note = "longer than this variant's sweep limit N=" + std::to_string(v.max_seq);
        std::cout << "   " << v.label() << ": skipped (" << r.note << ")\n";
        rows.push_back(r);
        continue;
      }
      BackwardResult out;
      const Measurement m = measure([&] {
        out = BackwardResult(p, kPoison);
        return v.run(p, data, out, cfg);
      });
      record(r, m, p.flops_backward(), bytes_backward_min(p));
      if (opt.flag("--deterministic")) r.values["deterministic"] = 1.0;
      print_measurement(std::cout, v.label(), v.ours, r, "extra memory (fwd+bwd)");
      if (m.status == Status::failed && v.ours) any_failed = true;

      if (m.status == Status::ok && v.ours && opt.verify) {
        try {
          const bool full = p.flops_backward() <= def.max_full_reference_flops;
          const BackwardVerification ver =
              verify_backward(p, data, out, full, def.sampled_rows, seed, def.tolerance_safety);
          print_verification(ver, def.reference_name);
          r.verified = true;
          r.verification_ok = ver.ok();
          r.reference = def.reference_name;
          r.verification = ver.how;
          r.max_abs_error = ver.max_abs();
          r.max_rel_error = ver.max_rel();
          r.rel_error = ver.rel_frobenius();
          if (!ver.ok()) any_failed = true;
        } catch (const std::exception& e) {
          std::cout << "      verification could not run: " << e.what() << "\n";
          r.verified = true;
          r.verification_ok = false;
          r.reference = def.reference_name;
          r.verification = std::string("error: ") + e.what();
          any_failed = true;
        }
      }
      if (m.status == Status::ok && v.ours && !saved && !opt.save_dir.empty()) {
        try {
          save_backward_outputs(opt.save_dir, out);
          save_upstream_gradient(opt.save_dir, data.d_o);  // the dO these gradients belong to
          std::cout << "      saved o, lse, dq, dk, dv (and the do) .npy to " << opt.save_dir << "\n";
          saved = true;
        } catch (const UsageError& e) {
          std::cerr << program << ": error: " << e.what() << "\n";
          return kExitUsage;
        }
      }
      rows.push_back(r);
    }
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::cout << "\n== results (backward, D=" << opt.problem.dim << (opt.problem.causal ? ", causal" : "")
            << (paper_shapes ? ", B·N = 16384 tokens, H·D = 2048" : "") << ", " << fmt("%.1f", elapsed) << " s)\n";
  print_results_table(std::cout, rows, "backward");

  std::vector<Series> mem, time, rate;
  for (const BackwardVariant& v : def.variants) {
    Series sm{v.label() + (v.ours ? "" : " (comparison)"), {}}, st = sm, sr = sm;
    for (const ResultRow& r : rows)
      if (r.stage == v.stage && r.variant == v.name && r.status == Status::ok) {
        const double n = static_cast<double>(r.problem.seq_k);
        sm.points.emplace_back(n, static_cast<double>(r.extra_bytes));
        st.points.emplace_back(n, r.median_ms);
        sr.points.emplace_back(n, r.tflops);
      }
    if (!sm.points.empty()) mem.push_back(sm), time.push_back(st), rate.push_back(sr);
  }
  print_chart(std::cout, "memory beyond inputs, outputs and gradients (forward + backward), measured",
              ChartUnit::bytes, mem);
  print_chart(std::cout, "backward time, median", ChartUnit::milliseconds, time);
  print_chart(std::cout, "backward TFLOP/s (2.5x the forward's FLOPs)", ChartUnit::tflops, rate);

  if (!opt.json_path.empty()) {
    if (!write_results(program, opt.json_path, def.id, meta, rows)) return kExitUsage;
    std::cout << "\nresults written to " << opt.json_path << "\n";
  }
  std::cout << "\n" << (any_failed ? "FAIL" : "PASS") << ": " << program << "\n";
  return any_failed ? kExitVerifyFailed : kExitOk;
}

}  // namespace fa
