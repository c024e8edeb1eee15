// The harness: one case loop for every stage, forward or backward (fa/stage.hpp).
#include "fa/stage.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <mutex>
#include <sstream>

#include "fa/backward.hpp"
#include "fa/chart.hpp"
#include "fa/files.hpp"
#include "fa/npy.hpp"
#include "fa/packed.hpp"
#include "fa/parallel.hpp"
#include "fa/random.hpp"
#include "fa/reference.hpp"

namespace fa {

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Host memory this machine has: the inputs, outputs and references of a case must fit in it, or
// the case is an `oom` row (allocating more would meet the kernel's OOM killer, not bad_alloc).
double host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 1e18;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Variants

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
    m.peak_bytes = m.extra_bytes + static_cast<std::int64_t>(p.bytes_io(Pass::forward));
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

// ---------------------------------------------------------------------------------------------
// Inputs and files

void require_finite(const HostTensor& t, const char* name) {
  // On every core (a long sequence's inputs are tens of billions of elements): each range stops at
  // its own first non-finite element, and the first of those is the tensor's, however it is split.
  std::mutex mutex;
  std::int64_t first = t.numel();
  parallel_ranges(t.numel(), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t n = begin; n < end; ++n)
      if (!std::isfinite(t.get(n))) {
        const std::lock_guard<std::mutex> lock(mutex);
        first = std::min(first, n);
        return;
      }
  });
  if (first == t.numel()) return;
  const Shape4 s = t.shape();
  const std::int64_t n = first, d = n % s.d, i = n / s.d % s.n, h = n / (s.d * s.n) % s.h, b = n / (s.d * s.n * s.h);
  throw UsageError(std::string(name) + "[" + std::to_string(b) + "," + std::to_string(h) + "," + std::to_string(i) +
                   "," + std::to_string(d) + "] is " + fmt("%g", t.get(n)) + ": inputs must be finite");
}

namespace {

// The largest Euclidean norm of a tensor's rows (of D elements), and its largest |element|. Both
// read the tensor in its own dtype: a float32 copy of a long sequence's inputs would be larger than
// the inputs.
double max_row_norm(const HostTensor& t) {
  const std::int64_t d = t.shape().d;
  const double max_square = parallel_max(
      t.numel() / d,
      [&](std::int64_t first_row, std::int64_t end_row) {
        double m = 0;
        for (std::int64_t r = first_row; r < end_row; ++r) {
          double sum = 0;
          for (std::int64_t c = 0; c < d; ++c) {
            const double x = t.get(r * d + c);
            sum += x * x;
          }
          m = std::max(m, sum);
        }
        return m;
      },
      (1 << 20) / std::max<std::int64_t>(d, 1));
  return std::sqrt(max_square);
}

double max_abs(const HostTensor& t) {
  return parallel_max(t.numel(), [&](std::int64_t begin, std::int64_t end) {
    double m = 0;
    for (std::int64_t n = begin; n < end; ++n) m = std::max(m, std::fabs(static_cast<double>(t.get(n))));
    return m;
  });
}

// "v[b,h,i,d]" for element n of a [B, H, N, D] tensor.
std::string element_name(const char* name, const HostTensor& t, std::int64_t n) {
  const Shape4 s = t.shape();
  const std::int64_t d = n % s.d, i = n / s.d % s.n, h = n / (s.d * s.n) % s.h, b = n / (s.d * s.n * s.h);
  return std::string(name) + "[" + std::to_string(b) + "," + std::to_string(h) + "," + std::to_string(i) + "," +
         std::to_string(d) + "]";
}

// A score scale·q·k beyond float32's range would make every stage's softmax NaN. Bounded first
// by scale·max|q|·max|k| (Cauchy–Schwarz, no O(N²) loop for ordinary inputs); only when that
// bound is too large are the scores computed, in float64, to name the first that overflows.
void require_finite_scores(const Problem& p, const AttentionData& in_any) {
  const double scale = p.softmax_scale(), limit = std::numeric_limits<float>::max();
  if (scale * max_row_norm(in_any.q) * max_row_norm(in_any.k) < limit) return;
  const AttentionData in = as_float32(in_any);
  if (p.packed()) {  // each sequence against its own keys (fa/packed.hpp)
    for (std::int64_t s = 0; s < p.batch; ++s) require_finite_scores(sequence_problem(p, s), sequence_inputs(p, in, s));
    return;
  }
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads; ++h) {
      const auto q = in.q.head(b, h).cast<double>();
      const auto k = in.k.head(b, h / (p.heads / p.kv_heads())).cast<double>();
      for (std::int64_t i = 0; i < p.seq_q; ++i)
        for (std::int64_t j = 0; j < p.keys_visible(i); ++j) {
          const double s = scale * q.row(i).dot(k.row(j));
          if (std::fabs(s) > limit)
            throw UsageError("the scaled score S[" + std::to_string(b) + "," + std::to_string(h) + "," +
                             std::to_string(i) + "," + std::to_string(j) + "] = " + fmt("%.3g", s) +
                             " overflows float32 (scale " + fmt("%g", scale) + ")");
        }
    }
}

// The flash stages (02 on) keep the un-normalized sum Σ_j exp(s_j - m)·v_j of a row in float32
// before they divide by the softmax's denominator; each weight is at most 1, so the sum is bounded
// by Nk·max|v|. A V whose sum could pass float32's range would give inf outputs, with or without
// the verification: refused, naming its first element that is too large. The rule is the same for
// every stage, so that a file either runs on all of them or on none.
void require_bounded_values(const Problem& p, const HostTensor& v) {
  const double limit = std::numeric_limits<float>::max() / static_cast<double>(std::max<std::int64_t>(p.seq_k, 1));
  std::mutex mutex;
  std::int64_t first = v.numel();
  parallel_ranges(v.numel(), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t n = begin; n < end; ++n)
      if (std::fabs(v.get(n)) > limit) {
        const std::lock_guard<std::mutex> lock(mutex);
        first = std::min(first, n);
        return;
      }
  });
  if (first == v.numel()) return;
  throw UsageError(element_name("v", v, first) + " is " + fmt("%g", v.get(first)) + ": with Nk = " + std::to_string(p.seq_k) +
                   " keys, |v| must stay below " + fmt("%.3g", limit) +
                   " (float32's largest value / Nk), or the softmax's un-normalized sum of Nk·|v| could overflow");
}

// The backward keeps sums of dO in float32 as the forward keeps sums of V, and the same rule holds
// for them. dV_j = Σ_i P_ij·dO_i adds the rows of every query that reads key j (Nq of each query
// head sharing it), each weight at most 1: |dO| stays below float32's largest / that count. Its
// products are bounded as well: dP_ij = dO_i·V_j and D_i = dO_i·O_i (O a mean of V's rows) are at
// most ‖dO_i‖·max‖V_j‖, dS = P∘(dP − D) twice that; dQ_i = scale·Σ_j dS_ij·K_j sums weights of 1 in
// all, dK_j = scale·Σ_i dS_ij·Q_i up to that count. Past these bounds the gradients could be inf,
// with or without the verification: refused, naming the first dO element or row at fault.
void require_bounded_output_grad(const Problem& p, const AttentionData& in) {
  const HostTensor& g = in.d_o;
  const double top = std::numeric_limits<float>::max();
  const double readers = static_cast<double>(std::max<std::int64_t>(p.seq_q, 1)) * (p.heads / p.kv_heads());
  const double element_limit = top / readers, scale = p.softmax_scale();
  const double growth =
      2.0 * max_row_norm(in.v) * std::max({1.0, scale * max_abs(in.k), scale * readers * max_abs(in.q)});
  const double norm_limit = growth > 0 ? top / growth : top;
  const std::int64_t d = g.shape().d;
  std::mutex mutex;
  std::int64_t first_element = g.numel(), first_row = g.numel() / d;
  parallel_ranges(g.numel() / d, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      double square = 0;
      std::int64_t element = -1;
      for (std::int64_t c = 0; c < d; ++c) {
        const double x = g.get(r * d + c);
        square += x * x;
        if (element < 0 && std::fabs(x) > element_limit) element = r * d + c;
      }
      if (element >= 0 || std::sqrt(square) > norm_limit) {
        const std::lock_guard<std::mutex> lock(mutex);
        if (element >= 0) first_element = std::min(first_element, element);
        else first_row = std::min(first_row, r);
        return;
      }
    }
  }, 1, (1 << 20) / std::max<std::int64_t>(d, 1));
  if (first_element < g.numel() && first_element / d <= first_row)
    throw UsageError(element_name("do", g, first_element) + " is " + fmt("%g", g.get(first_element)) + ": with " +
                     fmt("%.0f", readers) + " query rows on each key, |do| must stay below " +
                     fmt("%.3g", element_limit) + " (float32's largest value / that count), or dV's sum could overflow");
  if (first_row < g.numel() / d) {
    double square = 0;
    for (std::int64_t c = 0; c < d; ++c) square += static_cast<double>(g.get(first_row * d + c)) * g.get(first_row * d + c);
    const std::string row = element_name("do", g, first_row * d);
    throw UsageError(row.substr(0, row.rfind(',')) + ",:] has norm " + fmt("%.3g", std::sqrt(square)) +
                     ": with these v, k and q it must stay below " + fmt("%.3g", norm_limit) +
                     ", or dS = P∘(dO·V − D), dQ or dK could pass float32's range");
  }
}

void check_case_inputs(const Problem& p, const AttentionData& in, Pass pass) {
  require_finite(in.q, "q");
  require_finite(in.k, "k");
  require_finite(in.v, "v");
  require_bounded_values(p, in.v);
  // The scores first: past float32 they are the fault, whatever dO is (dO's bound below grows with
  // the scale, and would otherwise name dO for a scale that no dO could survive).
  require_finite_scores(p, in);
  if (pass == Pass::backward) {
    require_finite(in.d_o, "do");
    require_bounded_output_grad(p, in);
  }
}

}  // namespace

AttentionData make_case_inputs(const Problem& p, Pass pass, std::uint64_t seed, InputKind kind, bool for_verification) {
  // Inputs, outputs and (to verify) a float32 copy for the references, on the host; without the
  // verification, the inputs, the outputs and the one float32 tensor being drawn.
  const double need = (for_verification ? 2.5 : 1.5) * p.bytes_io(pass);
  if (need > 0.8 * host_memory_bytes())
    throw OutOfMemory("the host tensors of this case need " + format_bytes(need) + ", more than this machine's " +
                      format_bytes(host_memory_bytes()) + " allow");
  AttentionData in = make_inputs(p, seed, kind);
  if (pass == Pass::backward) in.d_o = make_output_grad(p, seed);
  check_case_inputs(p, in, pass);
  return in;
}

namespace {

// cu_seqlens.txt: integers separated by commas or whitespace, starting at 0, strictly increasing.
std::vector<std::int64_t> read_offsets(const std::string& path) {
  // 16 MiB holds the offsets of millions of sequences: a larger file (or /dev/zero) is no such list.
  std::string all = read_small_file(path, std::uint64_t{1} << 24, "--load");
  std::replace(all.begin(), all.end(), ',', ' ');
  std::istringstream in(all);
  std::vector<std::int64_t> cu;
  std::string word;
  while (in >> word) {
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size()) throw UsageError("--load: " + path + ": '" + word + "' is not an integer offset");
    cu.push_back(v);
  }
  if (cu.size() < 2 || cu.front() != 0)
    throw UsageError("--load: " + path + " must hold the offsets 0, L_0, L_0 + L_1, ..., total (at least two)");
  for (std::size_t s = 1; s < cu.size(); ++s)
    if (cu[s] <= cu[s - 1])
      throw UsageError("--load: " + path + ": the offsets must increase (sequence " + std::to_string(s - 1) +
                       " would have " + std::to_string(cu[s] - cu[s - 1]) + " tokens)");
  return cu;
}

}  // namespace

AttentionData load_inputs(const std::string& dir, Problem& problem, Pass pass, std::uint64_t seed, bool* generated_do) {
  const std::filesystem::path base(dir);
  if (!std::filesystem::is_directory(base)) throw UsageError("--load " + dir + ": not a directory");
  AttentionData d;
  d.q = read_npy_tensor((base / "q.npy").string());
  d.k = read_npy_tensor((base / "k.npy").string());
  d.v = read_npy_tensor((base / "v.npy").string());
  const Shape4 q = d.q.shape(), k = d.k.shape(), v = d.v.shape();
  if (!(k == v)) throw UsageError("--load: k.npy " + k.str() + " and v.npy " + v.str() + " differ in shape");
  if (q.b != k.b || q.d != k.d || k.h < 1 || q.h % k.h != 0)
    throw UsageError("--load: q.npy " + q.str() + " and k.npy " + k.str() +
                     " disagree on B or D, or the query heads are no multiple of the key heads");
  if (q.numel() == 0 || k.numel() == 0) throw UsageError("--load: empty tensors");
  problem.batch = q.b;
  problem.heads = q.h;
  problem.heads_kv = k.h;
  problem.seq_q = q.n;
  problem.seq_k = k.n;
  problem.dim = q.d;
  problem.seq_lens.clear();
  // A packed batch: [1, H, total, D] files and cu_seqlens.txt beside them, the B + 1 offsets
  // 0, L_0, L_0 + L_1, ..., total (written by np.savetxt, or by hand; commas or whitespace).
  if (const std::filesystem::path offsets = base / "cu_seqlens.txt"; std::filesystem::exists(offsets)) {
    const std::vector<std::int64_t> cu = read_offsets(offsets.string());
    if (q.b != 1 || q.n != k.n || cu.back() != q.n)
      throw UsageError("--load: a packed batch (cu_seqlens.txt) needs q.npy, k.npy, v.npy of shape [1, H, total, D] "
                       "with total = the last offset (" + std::to_string(cu.back()) + "); q.npy is " + q.str() +
                       ", k.npy " + k.str());
    std::vector<std::int64_t> lens;
    for (std::size_t s = 0; s + 1 < cu.size(); ++s) lens.push_back(cu[s + 1] - cu[s]);
    problem = packed_problem(problem, lens);
  }
  problem.validate();
  // The files' type becomes the problem's: a float16 file runs a float16 stage as it is, and is
  // converted (rounded) when --dtype asks for another type.
  for (HostTensor* t : {&d.q, &d.k, &d.v})
    if (t->dtype() != problem.dtype) *t = t->converted(problem.dtype);
  if (generated_do) *generated_do = false;
  if (pass == Pass::backward) {
    const std::filesystem::path path = base / "do.npy";
    if (std::filesystem::exists(path)) {
      d.d_o = read_npy_tensor(path.string());
      if (!(d.d_o.shape() == q)) throw UsageError("--load: do.npy must have the shape of q.npy " + q.str());
      if (d.d_o.dtype() != problem.dtype) d.d_o = d.d_o.converted(problem.dtype);
    } else {
      d.d_o = make_output_grad(problem, seed);
      if (generated_do) *generated_do = true;
    }
  }
  check_case_inputs(problem, d, pass);
  return d;
}

void save_outputs(const std::string& dir, const AttentionData& in, const AttentionResult& out, Pass pass) {
  check_writable_dir(dir, "--save");
  const std::filesystem::path base(dir);
  write_npy_tensor((base / "o.npy").string(), out.o);
  write_npy_lse((base / "lse.npy").string(), out.lse);
  if (pass == Pass::forward) return;
  write_npy_tensor((base / "dq.npy").string(), out.dq);
  write_npy_tensor((base / "dk.npy").string(), out.dk);
  write_npy_tensor((base / "dv.npy").string(), out.dv);
  write_npy_tensor((base / "do.npy").string(), in.d_o);  // the dO these gradients belong to
}

// ---------------------------------------------------------------------------------------------
// Reporting

namespace {

void record(ResultRow& r, const Measurement& m, const Problem& p, Pass pass) {
  r.status = m.status;
  r.note = m.note;
  r.median_ms = m.time.median_ms;
  r.min_ms = m.time.min_ms;
  r.max_ms = m.time.max_ms;
  r.reps = m.time.reps;
  r.peak_bytes = m.peak_bytes;
  r.extra_bytes = m.extra_bytes;
  r.driver_bytes = m.driver_bytes;
  r.split_ms = m.split_ms;
  if (m.status == Status::ok && m.time.median_ms > 0) {
    r.tflops = p.flops(pass) / (m.time.median_ms * 1e-3) / 1e12;
    r.gbps = p.bytes_min(pass) / (m.time.median_ms * 1e-3) / 1e9;
  }
}

void print_measurement(std::ostream& os, const Variant& v, const ResultRow& r, Pass pass) {
  os << "   " << v.label() << (v.ours ? "" : " (comparison)") << ": " << to_string(r.status);
  if (r.status == Status::ok)
    os << "  " << format_value(r.median_ms, ChartUnit::milliseconds) << "  " << fmt("%.3g", r.tflops)
       << " TFLOP/s  extra memory" << (pass == Pass::backward ? " (fwd+bwd) " : " ")
       << format_bytes(static_cast<double>(r.extra_bytes));
  else
    os << " (" << r.note << ")";
  os << "\n";
}

void print_results_table(std::ostream& os, const std::vector<ResultRow>& rows, Pass pass) {
  Table table;
  table.header = {"B x H, N (q x k)", "variant", "status", pass == Pass::forward ? "median" : "backward",
                  "TFLOP/s", "GB/s (min bytes)", "extra memory", "verified"};
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

// Memory first: that is the point of the course. Then time (and TFLOP/s for a backward).
void print_charts(std::ostream& os, const StageDefinition& def, const std::vector<ResultRow>& rows) {
  std::vector<Series> mem, time, rate;
  for (const Variant& v : def.variants) {
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
  const bool bwd = def.pass == Pass::backward;
  print_chart(os, bwd ? "memory beyond inputs, outputs and gradients (forward + backward), measured"
                      : "memory beyond inputs and outputs, measured",
              ChartUnit::bytes, mem);
  print_chart(os, bwd ? "backward time, median" : "time, median", ChartUnit::milliseconds, time);
  if (bwd) print_chart(os, "backward TFLOP/s (2.5x the forward's FLOPs)", ChartUnit::tflops, rate);
}

ResultRow blank_row(const Variant& v, const Problem& p, Pass pass) {
  ResultRow r;
  r.stage = v.stage;
  r.variant = v.name;
  r.comparison = !v.ours;
  r.pass = pass;
  r.problem = p;
  return r;
}

Verification verify_case(const StageDefinition& def, const Problem& p, const AttentionData& in,
                         const AttentionResult& out, std::uint64_t seed) {
  if (def.pass == Pass::forward) return verify_forward(p, in, out, def.verify, seed);
  const bool full = p.flops_backward() <= def.verify.max_full_flops;
  return verify_backward(p, in, out, full, def.verify.sampled_rows, seed, def.verify.backward_safety);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The run

Problem paper_shape(Problem p) {
  p.batch = std::max<std::int64_t>(1, 16384 / std::max(p.seq_q, p.seq_k));
  p.heads = 2048 / p.dim;
  p.heads_kv = 0;  // Hkv = Hq
  return p;
}

std::string use_paper_shapes(const RunOptions& opt, StageDefinition& def) {
  if (!opt.load_dir.empty()) return "--paper-shapes and --load cannot be combined";
  if (opt.problem.dim <= 0 || 2048 % opt.problem.dim != 0)
    return "--paper-shapes needs D dividing 2048, not D = " + std::to_string(opt.problem.dim);
  def.shape_case = paper_shape;
  def.shape_note = "B·N = 16384 tokens, H·D = 2048";
  return "";
}

namespace {

int run_stage_cases(const StageCli& cli, const StageDefinition& def) {
  const RunOptions& opt = cli.options();
  const std::string& program = cli.spec().program;
  auto usage_error = [&](const std::string& what) {
    std::cerr << program << ": error: " << what << "\n";
    return kExitUsage;
  };
  const RunMetadata meta = def.metadata ? def.metadata(opt.command_line) : host_metadata(opt.command_line);
  RunConfig cfg;
  cfg.warmup = opt.warmup >= 0 ? opt.warmup : def.default_warmup;
  cfg.reps = opt.reps > 0 ? opt.reps : def.default_reps;
  cfg.mem_limit_bytes = static_cast<std::int64_t>(
      (opt.mem_limit_gb > 0 ? opt.mem_limit_gb : def.default_mem_limit_gb) * 1024.0 * 1024.0 * 1024.0);
  const Pass pass = def.pass;
  std::cout << "== " << program << " — " << cli.spec().summary << "\n";

  // Inputs from files, or the sizes of a sweep.
  Problem base = opt.problem;
  std::vector<std::pair<std::int64_t, std::int64_t>> sizes = opt.sizes;
  AttentionData loaded;
  if (!opt.load_dir.empty()) {
    try {
      bool generated_do = false;
      loaded = load_inputs(opt.load_dir, base, pass, opt.seed, &generated_do);
      base.require(cli.spec().supports);
      if (generated_do)
        std::cout << "   " << opt.load_dir << " has no do.npy: dO drawn with seed " << opt.seed
                  << " (saved as do.npy with --save)\n";
    } catch (const UsageError& e) {
      return usage_error(e.what());
    }
    sizes = {{base.seq_q, base.seq_k}};
  }
  auto problem_of = [&](std::size_t c) {
    Problem p = base;
    p.seq_q = sizes[c].first;
    p.seq_k = sizes[c].second;
    return def.shape_case ? def.shape_case(p) : p;
  };

  std::vector<ResultRow> rows;
  const std::string skip = def.skip_reason ? def.skip_reason() : std::string();
  if (!skip.empty()) {
    std::cout << "skipped: " << skip << "\n";
    for (std::size_t c = 0; c < sizes.size(); ++c)
      for (const Variant& v : def.variants) {
        ResultRow r = blank_row(v, problem_of(c), pass);
        r.status = Status::skipped;
        r.note = skip;
        rows.push_back(r);
      }
    if (!opt.json_path.empty()) try {
        write_results_json(opt.json_path, def.id, meta, rows);
      } catch (const UsageError& e) {
        return usage_error(e.what());
      }
    return kExitSkipped;
  }
  std::cout << "   on " << meta.device << (meta.cuda_runtime.empty() ? "" : ", CUDA " + meta.cuda_runtime) << "; timing "
            << (pass == Pass::backward ? "the backward" : "") << ": " << cfg.warmup << " warm-up, median of "
            << cfg.reps << "+ runs\n";

  bool any_failed = false, any_ran = false, saved = false;
  std::string first_refusal;  // a case our variant refused as bad usage (measure: UsageError -> skipped)
  bool any_oom = false;
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t c = 0; c < sizes.size(); ++c) {
    const Problem p = problem_of(c);
    const std::uint64_t seed = opt.seed + 7919 * c;
    std::cout << "\n-- case " << c + 1 << " of " << sizes.size() << ": " << p.describe() << ", "
              << (opt.load_dir.empty() ? std::string(to_string(opt.inputs)) + " inputs, seed " + std::to_string(seed)
                                       : "inputs from " + opt.load_dir)
              << "\n";
    AttentionData in;
    std::string inputs_oom;
    try {
      in = opt.load_dir.empty() ? make_case_inputs(p, pass, seed, opt.inputs, opt.verify) : std::move(loaded);
    } catch (const UsageError& e) {
      return usage_error(e.what());
    } catch (const std::bad_alloc& e) {  // OutOfMemory too
      inputs_oom = dynamic_cast<const OutOfMemory*>(&e) ? e.what() : "the host inputs do not fit";
    }

    for (const Variant& v : def.variants) {
      if (!opt.variant.empty() && v.ours && v.name != opt.variant) continue;
      ResultRow r = blank_row(v, p, pass);
      if (v.on_host && !meta.cuda_runtime.empty()) r.device = host_device_name();
      if (!inputs_oom.empty() || (v.max_seq > 0 && std::max(p.seq_q, p.seq_k) > v.max_seq)) {
        r.status = inputs_oom.empty() ? Status::skipped : Status::oom;
        r.note = inputs_oom.empty() ? "longer than this variant's sweep limit N=" + std::to_string(v.max_seq) : inputs_oom;
        std::cout << "   " << v.label() << ": " << to_string(r.status) << " (" << r.note << ")\n";
        rows.push_back(r);
        continue;
      }
      AttentionResult out;
      const Measurement m = measure([&] {
        out = AttentionResult(p, pass);
        return v.run(p, in, out, cfg);
      });
      record(r, m, p, pass);
      print_measurement(std::cout, v, r, pass);
      if (m.status == Status::failed && v.ours) any_failed = true;
      if (m.status == Status::ok && v.ours) any_ran = true;
      if (m.status == Status::oom && v.ours) any_oom = true;
      if (m.status == Status::skipped && v.ours && first_refusal.empty()) first_refusal = m.note;

      if (m.status == Status::ok && v.ours && opt.verify) {
        r.verified = true;
        try {
          const Verification ver = verify_case(def, p, in, out, seed);
          ver.print(std::cout);
          r.verification_ok = ver.ok();
          r.reference = ver.against;
          r.verification = ver.how;
          r.max_abs_error = ver.max_abs();
          r.max_rel_error = ver.max_rel();
          r.rel_error = ver.rel_frobenius();
          r.error_vs_plain = ver.error_vs_plain;
        } catch (const std::exception& e) {
          std::cout << "      verification could not run: " << e.what() << "\n";
          r.verification = std::string("error: ") + e.what();
        }
        if (!r.verification_ok) any_failed = true;
      }
      if (m.status == Status::ok && v.ours && !saved && !opt.save_dir.empty()) {
        try {
          save_outputs(opt.save_dir, in, out, pass);
          std::cout << "      saved " << (pass == Pass::forward ? "o, lse" : "o, lse, dq, dk, dv (and the do)")
                    << " .npy to " << opt.save_dir << "\n";
          saved = true;
        } catch (const UsageError& e) {
          return usage_error(e.what());
        }
      }
      rows.push_back(r);
    }
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::cout << "\n== results (" << (pass == Pass::backward ? "backward, " : "") << fmt("%.1f", elapsed) << " s"
            << (def.shape_note.empty() ? "" : ", " + def.shape_note) << ")\n";
  print_results_table(std::cout, rows, pass);
  print_charts(std::cout, def, rows);
  if (def.extra_report) def.extra_report(std::cout, rows);

  if (!opt.json_path.empty()) {
    try {
      write_results_json(opt.json_path, def.id, meta, rows);
    } catch (const UsageError& e) {
      return usage_error(e.what());
    }
    std::cout << "\nresults written to " << opt.json_path << "\n";
  }
  // Nothing ran because the stage refused what was asked (a variant that cannot run this D, say): the
  // request was bad usage, said in one line with exit 2, not a failed run.
  if (!any_ran && !any_oom && !first_refusal.empty()) return usage_error(first_refusal);
  if (!any_ran) {
    std::cout << "\nFAIL: " << program << ": nothing ran (every case was out of memory or skipped)\n";
    return kExitVerifyFailed;
  }
  std::cout << "\n" << (any_failed ? "FAIL" : "PASS") << ": " << program << "\n";
  return any_failed ? kExitVerifyFailed : kExitOk;
}

}  // namespace

int run_stage(const StageCli& cli, const StageDefinition& def) {
  const int code = run_stage_cases(cli, def);
  // The report is the run's result: one that never reached the user (standard output a full disk,
  // or closed) is no PASS. Said on stderr, in one line, as a file that cannot be written is.
  std::cout.flush();
  if (!std::cout && code != kExitUsage) {
    std::cerr << cli.spec().program << ": error: the report could not be written to standard output\n";
    return kExitUsage;
  }
  return code;
}

}  // namespace fa
