#include "fa/stage.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <sstream>

#include "fa/chart.hpp"
#include "fa/npy.hpp"
#include "fa/random.hpp"
#include "fa/reference.hpp"

namespace fa {

namespace {

constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Host variants

Variant host_variant(std::string stage, std::string name, bool ours, HostForward fn, std::int64_t max_seq) {
  Variant v;
  v.stage = std::move(stage);
  v.name = std::move(name);
  v.ours = ours;
  v.max_seq = max_seq;
  v.on_host = true;
  v.run = [fn](const Problem& p, const AttentionData& in, AttentionResult& out, const RunConfig& cfg) {
    Measurement m;
    MemoryMeter workspace(cfg.mem_limit_bytes);
    // The first run writes the poisoned outputs that are verified; its meter peak is the memory.
    fn(p, in.view(), out.view(), workspace);
    m.extra_bytes = workspace.peak();
    m.peak_bytes = m.extra_bytes + static_cast<std::int64_t>(in.q.bytes() + in.k.bytes() + in.v.bytes() +
                                                             out.o.bytes() + out.lse.bytes());
    m.time = time_host([&] { fn(p, in.view(), out.view(), workspace); }, cfg.warmup, cfg.reps);
    return m;
  };
  return v;
}

ForwardFn host_forward(HostForward fn) {
  return [fn](const Problem& p, const AttentionData& in, AttentionResult& out) {
    MemoryMeter workspace;
    fn(p, in.view(), out.view(), workspace);
  };
}

// ---------------------------------------------------------------------------------------------
// Verification

Verification verify_full(const AttentionResult& got, const AttentionResult& ref, Tolerance tol) {
  Verification v;
  v.o = compare("O", got.o.values(), ref.o.values(), tol);
  v.lse = compare("LSE", got.lse.values(), ref.lse.values(), tol);
  v.how = "all rows";
  return v;
}

Tolerance tolerance_for(Tolerance base, InputKind inputs) {
  if (inputs == InputKind::large_logits) return {base.atol * 10, base.rtol * 10};
  return base;
}

Tolerance tolerance_for_keys(Tolerance base, std::int64_t nk) {
  const double long_sum = 2.0 * 0x1.0p-24 * std::sqrt(static_cast<double>(nk));
  return {std::fmax(base.atol, long_sum), std::fmax(base.rtol, long_sum)};
}

Verification verify_sampled(const Problem& p, const AttentionData& in, const AttentionResult& got,
                            const ForwardFn& row_forward, Tolerance tol, int count, std::uint64_t seed) {
  Verification v;
  const auto rows = sample_rows(p, count, seed);
  const std::int64_t D = p.dim;
  std::vector<float> got_o, ref_o, got_lse, ref_lse;
  for (const RowId& r : rows) {
    const std::int64_t flat_row = (r.b * p.heads + r.h) * p.seq_q + r.i;
    const float* g = got.o.data() + flat_row * D;
    got_o.insert(got_o.end(), g, g + D);
    got_lse.push_back(got.lse.data()[flat_row]);
    if (p.keys_visible(r.i) == 0) {  // a row that sees no key: O = 0, LSE = -inf by the contract
      ref_o.insert(ref_o.end(), static_cast<std::size_t>(D), 0.0f);
      ref_lse.push_back(-std::numeric_limits<float>::infinity());
      continue;
    }
    const Problem one = one_row_problem(p, r);
    const AttentionData one_in = one_row_inputs(p, in, r);
    AttentionResult one_out(one, kPoison);
    row_forward(one, one_in, one_out);
    ref_o.insert(ref_o.end(), one_out.o.values().begin(), one_out.o.values().end());
    ref_lse.push_back(one_out.lse.values()[0]);
  }
  v.o = compare("O", got_o, ref_o, tol);
  v.lse = compare("LSE", got_lse, ref_lse, tol);
  v.how = std::to_string(rows.size()) + " sampled rows";
  return v;
}

// ---------------------------------------------------------------------------------------------
// Files

AttentionData load_inputs(const std::string& dir, Problem& problem) {
  const std::filesystem::path base(dir);
  if (!std::filesystem::is_directory(base)) throw UsageError("--load " + dir + ": not a directory");
  AttentionData d{read_npy_tensor((base / "q.npy").string()), read_npy_tensor((base / "k.npy").string()),
                  read_npy_tensor((base / "v.npy").string())};
  const Shape4 q = d.q.shape(), k = d.k.shape(), v = d.v.shape();
  auto dims = [](Shape4 s) {
    return "[" + std::to_string(s.b) + "," + std::to_string(s.h) + "," + std::to_string(s.n) + "," +
           std::to_string(s.d) + "]";
  };
  if (!(k == v)) throw UsageError("--load: k.npy " + dims(k) + " and v.npy " + dims(v) + " differ in shape");
  if (q.b != k.b || q.h != k.h || q.d != k.d)
    throw UsageError("--load: q.npy " + dims(q) + " and k.npy " + dims(k) + " disagree on B, H or D");
  if (q.numel() == 0 || k.numel() == 0) throw UsageError("--load: empty tensors");
  problem.batch = q.b;
  problem.heads = q.h;
  problem.seq_q = q.n;
  problem.seq_k = k.n;
  problem.dim = q.d;
  problem.validate();
  return d;
}

void save_outputs(const std::string& dir, const AttentionResult& out) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw UsageError("--save " + dir + ": " + ec.message());
  const std::filesystem::path base(dir);
  write_npy_tensor((base / "o.npy").string(), out.o);
  write_npy_lse((base / "lse.npy").string(), out.lse);
}

// ---------------------------------------------------------------------------------------------
// Pieces shared with the backward harness

Measurement measure(const std::function<Measurement()>& run) {
  Measurement m;
  try {
    m = run();
  } catch (const OutOfMemory& e) {
    m.status = Status::oom;
    m.note = e.what();
  } catch (const std::bad_alloc&) {
    m.status = Status::oom;
    m.note = "host allocation failed";
  } catch (const UsageError& e) {
    m.status = Status::skipped;
    m.note = e.what();
  } catch (const std::exception& e) {
    m.status = Status::failed;
    m.note = e.what();
  }
  return m;
}

void record(ResultRow& r, const Measurement& m, double flops, double min_bytes) {
  r.status = m.status;
  r.note = m.note;
  r.median_ms = m.time.median_ms;
  r.min_ms = m.time.min_ms;
  r.max_ms = m.time.max_ms;
  r.reps = m.time.reps;
  r.peak_bytes = m.peak_bytes;
  r.extra_bytes = m.extra_bytes;
  r.split_ms = m.split_ms;
  r.values.insert(m.values.begin(), m.values.end());
  if (m.status == Status::ok && m.time.median_ms > 0) {
    r.tflops = flops / (m.time.median_ms * 1e-3) / 1e12;
    r.gbps = min_bytes / (m.time.median_ms * 1e-3) / 1e9;
  }
}

void print_measurement(std::ostream& os, const std::string& label, bool ours, const ResultRow& r,
                       const std::string& memory_words) {
  os << "   " << label << (ours ? "" : " (comparison)") << ": " << to_string(r.status);
  if (r.status == Status::ok)
    os << "  " << format_value(r.median_ms, ChartUnit::milliseconds) << "  " << fmt("%.3g", r.tflops)
       << " TFLOP/s  " << memory_words << " " << format_bytes(static_cast<double>(r.extra_bytes));
  else
    os << " (" << r.note << ")";
  os << "\n";
}

void print_results_table(std::ostream& os, const std::vector<ResultRow>& rows, const std::string& time_header) {
  Table table;
  table.header = {"B x H, N (q x k)", "variant", "status", time_header, "TFLOP/s", "GB/s (min bytes)",
                  "extra memory", "verified"};
  for (const ResultRow& r : rows) {
    const Problem& p = r.problem;
    const std::string n = p.seq_q == p.seq_k ? std::to_string(p.seq_q)
                                             : std::to_string(p.seq_q) + "x" + std::to_string(p.seq_k);
    const bool ran = r.status == Status::ok;
    table.rows.push_back({std::to_string(p.batch) + "x" + std::to_string(p.heads) + ", " + n,
                          r.stage + " " + r.variant, to_string(r.status),
                          ran ? format_value(r.median_ms, ChartUnit::milliseconds) : "-",
                          ran ? fmt("%.3g", r.tflops) : "-", ran ? fmt("%.3g", r.gbps) : "-",
                          ran ? format_bytes(static_cast<double>(r.extra_bytes)) : "-",
                          r.verified ? (r.verification_ok ? "PASS" : "FAIL") : "-"});
  }
  table.print(os);
}

bool write_results(const std::string& program, const std::string& path, const std::string& stage,
                   const RunMetadata& meta, const std::vector<ResultRow>& rows) {
  try {
    write_results_json(path, stage, meta, rows);
    return true;
  } catch (const UsageError& e) {
    std::cerr << program << ": error: " << e.what() << "\n";
    return false;
  }
}

// ---------------------------------------------------------------------------------------------
// The run

namespace {

struct CaseOutcome {
  std::vector<ResultRow> rows;
  bool failed = false;
};

void print_verification(const Verification& v, const std::string& against) {
  std::cout << "      verified against " << against << " (" << v.how << "): "
            << (v.ok() ? "PASS" : "FAIL") << "\n"
            << "        " << v.o.summary() << "\n"
            << "        " << v.lse.summary() << "\n";
}

}  // namespace

int run_stage(int argc, const char* const* argv, const StageDefinition& def) {
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

  RunMetadata meta = def.metadata ? def.metadata(opt.command_line) : host_metadata(opt.command_line);
  RunConfig cfg;
  cfg.warmup = opt.warmup >= 0 ? opt.warmup : def.default_warmup;
  cfg.reps = opt.reps > 0 ? opt.reps : def.default_reps;
  cfg.mem_limit_bytes = static_cast<std::int64_t>(
      (opt.mem_limit_gb > 0 ? opt.mem_limit_gb : def.default_mem_limit_gb) * 1024.0 * 1024.0 * 1024.0);
  cfg.options = &opt;

  std::cout << "== " << program << " — " << def.cli.summary << "\n";

  // Inputs from files, or the sizes of a sweep.
  AttentionData loaded;
  if (!opt.load_dir.empty()) {
    try {
      loaded = load_inputs(opt.load_dir, opt.problem);
      if (!def.cli.dims.empty() &&
          std::find(def.cli.dims.begin(), def.cli.dims.end(), opt.problem.dim) == def.cli.dims.end())
        throw UsageError("--load: D = " + std::to_string(opt.problem.dim) + " is not supported by " + program);
    } catch (const UsageError& e) {
      std::cerr << program << ": error: " << e.what() << "\n";
      return kExitUsage;
    }
    opt.sizes = {{opt.problem.seq_q, opt.problem.seq_k}};
  }

  std::vector<ResultRow> rows;
  const std::string skip = def.skip_reason ? def.skip_reason() : std::string();
  if (!skip.empty()) {
    std::cout << "skipped: " << skip << "\n";
    for (const auto& [nq, nk] : opt.sizes)
      for (const Variant& v : def.variants) {
        ResultRow r;
        r.stage = v.stage;
        r.variant = v.name;
        r.problem = opt.problem;
        r.problem.seq_q = nq;
        r.problem.seq_k = nk;
        r.dtype = opt.dtype;
        r.status = Status::skipped;
        r.note = skip;
        rows.push_back(r);
      }
    if (!opt.json_path.empty() && !write_results(program, opt.json_path, def.id, meta, rows)) return kExitUsage;
    return kExitSkipped;
  }
  std::cout << "   on " << meta.device << (meta.cuda_runtime.empty() ? "" : ", CUDA " + meta.cuda_runtime)
            << "; timing: " << cfg.warmup << " warm-up, median of " << cfg.reps << "+ runs\n";

  bool any_failed = false;
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t c = 0; c < opt.sizes.size(); ++c) {
    Problem p = opt.problem;
    p.seq_q = opt.sizes[c].first;
    p.seq_k = opt.sizes[c].second;
    const std::uint64_t seed = opt.seed + 7919 * c;
    AttentionData in = opt.load_dir.empty() ? make_inputs(p, seed, opt.inputs) : std::move(loaded);
    std::cout << "\n-- case " << c + 1 << " of " << opt.sizes.size() << ": " << p.describe() << ", "
              << (opt.load_dir.empty() ? std::string(to_string(opt.inputs)) + " inputs, seed " + std::to_string(seed)
                                       : "inputs from " + opt.load_dir)
              << "\n";

    std::optional<AttentionResult> reference_out;  // computed once per case, on demand
    bool saved = false;
    for (const Variant& v : def.variants) {
      if (!opt.variant.empty() && v.ours && v.name != opt.variant) continue;
      ResultRow r;
      r.stage = v.stage;
      r.variant = v.name;
      r.problem = p;
      r.dtype = opt.dtype;
      if (v.on_host && !meta.cuda_runtime.empty()) r.device = host_device_name();
      if (v.max_seq > 0 && std::max(p.seq_q, p.seq_k) > v.max_seq) {
        r.status = Status::skipped;
        r.note = "longer than this variant's sweep limit N=" + std::to_string(v.max_seq);
        std::cout << "   " << v.label() << ": skipped (" << r.note << ")\n";
        rows.push_back(r);
        continue;
      }
      AttentionResult out(p, kPoison);
      const Measurement m = measure([&] { return v.run(p, in, out, cfg); });
      record(r, m, p.flops_forward(), p.bytes_forward_min());
      print_measurement(std::cout, v.label(), v.ours, r);
      if (m.status == Status::failed && v.ours) any_failed = true;

      if (m.status == Status::ok && v.ours && opt.verify) {
        Verification ver;
        std::string against;
        try {
          bool full = p.flops_forward() <= def.max_full_reference_flops;
          if (full && !reference_out) {
            try {
              reference_out.emplace(p, kPoison);
              def.reference.forward(p, in, *reference_out);
            } catch (const std::bad_alloc&) {  // the reference itself does not fit: sample rows
              std::cout << "      (the reference " << def.reference.name << " ran out of memory at this size)\n";
              reference_out.reset();
              full = false;
            }
          }
          if (full) {
            ver = verify_full(out, *reference_out,
                              tolerance_for_keys(tolerance_for(def.reference.tol, opt.inputs), p.seq_k));
            against = def.reference.name;
          } else {
            const Reference& rr = def.row_reference ? *def.row_reference : def.reference;
            ver = verify_sampled(p, in, out, rr.forward,
                                 tolerance_for_keys(tolerance_for(rr.tol, opt.inputs), p.seq_k), def.sampled_rows,
                                 seed);
            against = rr.name;
          }
          print_verification(ver, against);
          r.verified = true;
          r.verification_ok = ver.ok();
          r.reference = against;
          r.verification = ver.how;
          r.max_abs_error = std::fmax(ver.o.max_abs, ver.lse.max_abs);
          r.max_rel_error = std::fmax(ver.o.max_rel, ver.lse.max_rel);
          r.rel_error = ver.o.rel_frobenius;
          if (!ver.ok()) any_failed = true;
        } catch (const std::exception& e) {
          std::cout << "      verification could not run: " << e.what() << "\n";
          r.verified = true;
          r.verification_ok = false;
          r.reference = def.reference.name;
          r.verification = std::string("error: ") + e.what();
          any_failed = true;
        }
      }
      if (m.status == Status::ok && v.ours && !saved && !opt.save_dir.empty()) {
        try {
          save_outputs(opt.save_dir, out);
          std::cout << "      saved o.npy and lse.npy to " << opt.save_dir << "\n";
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

  std::cout << "\n== results (" << fmt("%.1f", elapsed) << " s)\n";
  print_results_table(std::cout, rows, "median");

  // Charts: this stage against the previous one, memory first: that is the point of the course.
  std::vector<Series> mem, time;
  for (const Variant& v : def.variants) {
    Series sm{v.label() + (v.ours ? "" : " (previous)"), {}}, st = sm;
    for (const ResultRow& r : rows)
      if (r.stage == v.stage && r.variant == v.name && r.status == Status::ok) {
        sm.points.emplace_back(static_cast<double>(r.problem.seq_k), static_cast<double>(r.extra_bytes));
        st.points.emplace_back(static_cast<double>(r.problem.seq_k), r.median_ms);
      }
    if (!sm.points.empty()) mem.push_back(sm), time.push_back(st);
  }
  print_chart(std::cout, "memory beyond inputs and outputs, measured", ChartUnit::bytes, mem);
  print_chart(std::cout, "time, median", ChartUnit::milliseconds, time);
  if (def.extra_report) def.extra_report(std::cout, rows);

  if (!opt.json_path.empty()) {
    if (!write_results(program, opt.json_path, def.id, meta, rows)) return kExitUsage;
    std::cout << "\nresults written to " << opt.json_path << "\n";
  }
  std::cout << "\n" << (any_failed ? "FAIL" : "PASS") << ": " << program << "\n";
  return any_failed ? kExitVerifyFailed : kExitOk;
}

}  // namespace fa
