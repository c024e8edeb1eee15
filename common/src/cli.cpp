#include "fa/cli.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

namespace fa {

bool Options::flag(const std::string& name) const {
  return std::find(set_flags.begin(), set_flags.end(), name) != set_flags.end();
}

std::int64_t parse_size(const std::string& text, const std::string& flag) {
  std::string digits = text;
  std::int64_t mult = 1;
  if (!digits.empty() && (digits.back() == 'k' || digits.back() == 'K')) mult = 1024, digits.pop_back();
  else if (!digits.empty() && (digits.back() == 'm' || digits.back() == 'M')) mult = 1024 * 1024, digits.pop_back();
  std::int64_t value = 0;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || ec != std::errc() || ptr != digits.data() + digits.size() || value < 1 ||
      value > (std::int64_t{1} << 40) / mult)
    throw UsageError(flag + " expects a positive integer (k and M suffixes allowed), got '" + text + "'");
  return value * mult;
}

std::vector<std::int64_t> parse_size_list(const std::string& text, const std::string& flag) {
  std::vector<std::int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(parse_size(item, flag));
  if (out.empty()) throw UsageError(flag + " expects a comma-separated list of sizes");
  return out;
}

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

float parse_float(const std::string& text, const std::string& flag) {
  try {
    std::size_t used = 0;
    const float v = std::stof(text, &used);
    if (used != text.size()) throw std::invalid_argument(text);
    return v;
  } catch (const std::exception&) {
    throw UsageError(flag + " expects a number, got '" + text + "'");
  }
}

}  // namespace

std::string usage(const CliSpec& spec) {
  std::ostringstream s;
  std::string sweep;
  for (auto n : spec.default_sweep) sweep += (sweep.empty() ? "" : ",") + std::to_string(n);
  s << spec.program << " — " << spec.summary << "\n\n"
    << "usage: " << spec.program << " [options]\n\n"
    << "problem (tensors are [B, H, N, D], float32, contiguous):\n"
    << "  --batch B            batch size (default " << spec.defaults.batch << ")\n"
    << "  --heads H            heads (default " << spec.defaults.heads << ")\n"
    << "  --seq N              one sequence length for queries and keys (instead of a sweep)\n"
    << "  --seq-q NQ --seq-k NK  different query and key lengths\n"
    << "  --dim D              head dimension (default " << spec.defaults.dim << ")";
  if (!spec.dims.empty()) {
    s << "; supported:";
    for (auto d : spec.dims) s << " " << d;
  }
  s << "\n"
    << "  --causal             query i sees key j iff j <= i + (Nk - Nq)\n"
    << "  --scale S            softmax scale (default 1/sqrt(D))\n"
    << "  --dtype T            " << join(spec.dtypes) << " (default " << spec.dtypes.front() << ")\n"
    << "  --seed S             seed of the random inputs (default 2024)\n"
    << "  --inputs KIND        normal | large-logits | ramp (default normal)\n\n"
    << "run:\n"
    << "  --sweep N1,N2,...    sequence lengths to run (default " << sweep << "; k and M suffixes ok)\n"
    << "  --reps R             timed repetitions per case (median reported)\n"
    << "  --warmup W           untimed runs before timing\n"
    << "  --no-verify          skip the comparison with the reference\n"
    << "  --mem-limit-gb G     treat allocations beyond G GiB as out of memory\n";
  if (!spec.variants.empty()) s << "  --variant NAME       run only one of: " << join(spec.variants) << "\n";
  for (const auto& f : spec.extra_flags) s << "  " << f << "\n";
  s << "\nfiles:\n"
    << "  --load DIR           read q.npy k.npy v.npy ([B,H,N,D], float32 or float16)\n"
    << "  --save DIR           write o.npy and lse.npy (float32) of a single-size run\n"
    << "  --json FILE          write the results (one object per measured case)\n"
    << "  --help               this text\n\n"
    << "exit codes: 0 ok, 1 verification failed, 2 bad usage or input, 77 skipped (no CUDA device)\n";
  if (!spec.notes.empty()) s << "\n" << spec.notes << "\n";
  return s.str();
}

Options parse_cli(int argc, const char* const* argv, const CliSpec& spec) {
  Options o;
  o.problem = spec.defaults;
  for (int i = 0; i < argc; ++i) o.command_line += (i ? " " : "") + std::string(argv[i]);

  std::int64_t seq = 0, seq_q = 0, seq_k = 0;
  std::vector<std::int64_t> sweep;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool has_inline = false;
    if (const auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_inline = true;
    }
    auto next = [&]() -> std::string {
      if (has_inline) return value;
      if (i + 1 >= argc) throw UsageError(arg + " needs a value");
      return argv[++i];
    };
    auto no_value = [&] {
      if (has_inline) throw UsageError(arg + " takes no value");
    };
    if (arg == "--help" || arg == "-h") { no_value(); o.help = true; }
    else if (arg == "--batch") o.problem.batch = parse_size(next(), arg);
    else if (arg == "--heads") o.problem.heads = parse_size(next(), arg);
    else if (arg == "--seq") seq = parse_size(next(), arg);
    else if (arg == "--seq-q") seq_q = parse_size(next(), arg);
    else if (arg == "--seq-k") seq_k = parse_size(next(), arg);
    else if (arg == "--dim") o.problem.dim = parse_size(next(), arg);
    else if (arg == "--causal") { no_value(); o.problem.causal = true; }
    else if (arg == "--scale") {
      const float s = parse_float(next(), arg);
      if (!(s > 0.0f) || !std::isfinite(s)) throw UsageError("--scale must be a positive finite number");
      o.problem.scale = s;
    }
    else if (arg == "--dtype") o.dtype = next();
    else if (arg == "--seed") o.seed = static_cast<std::uint64_t>(parse_size(next(), arg));
    else if (arg == "--inputs") o.inputs = parse_input_kind(next());
    else if (arg == "--sweep") sweep = parse_size_list(next(), arg);
    else if (arg == "--reps") o.reps = static_cast<int>(std::min<std::int64_t>(parse_size(next(), arg), 100000));
    else if (arg == "--warmup") {
      const std::string v = next();
      o.warmup = v == "0" ? 0 : static_cast<int>(std::min<std::int64_t>(parse_size(v, arg), 1000));
    }
    else if (arg == "--no-verify") { no_value(); o.verify = false; }
    else if (arg == "--load") o.load_dir = next();
    else if (arg == "--save") o.save_dir = next();
    else if (arg == "--json") o.json_path = next();
    else if (arg == "--mem-limit-gb") {
      o.mem_limit_gb = parse_float(next(), arg);
      if (!(o.mem_limit_gb > 0)) throw UsageError("--mem-limit-gb must be positive");
    }
    else if (arg == "--variant" && !spec.variants.empty()) {
      o.variant = next();
      if (std::find(spec.variants.begin(), spec.variants.end(), o.variant) == spec.variants.end())
        throw UsageError("--variant must be one of " + join(spec.variants) + ", got '" + o.variant + "'");
    }
    else if (std::find(spec.extra_flags.begin(), spec.extra_flags.end(), arg) != spec.extra_flags.end()) {
      no_value();
      o.set_flags.push_back(arg);
    }
    else throw UsageError("unknown option '" + arg + "' (see --help)");
  }
  if (o.help) return o;

  if (std::find(spec.dtypes.begin(), spec.dtypes.end(), o.dtype) == spec.dtypes.end())
    throw UsageError("--dtype must be one of " + join(spec.dtypes) + " for " + spec.program + ", got '" + o.dtype + "'");
  if (!spec.dims.empty() && std::find(spec.dims.begin(), spec.dims.end(), o.problem.dim) == spec.dims.end()) {
    std::string dims;
    for (auto d : spec.dims) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
    throw UsageError("--dim " + std::to_string(o.problem.dim) + " is not supported by " + spec.program +
                     " (supported: " + dims + ")");
  }
  if (seq && (seq_q || seq_k)) throw UsageError("give either --seq or --seq-q/--seq-k, not both");
  if (!sweep.empty() && seq) throw UsageError("give either --seq or --sweep, not both");
  if (seq) seq_q = seq_k = seq;

  if (!o.load_dir.empty()) {
    if (!sweep.empty() || seq_q || seq_k) throw UsageError("--load takes its shapes from the files; drop --seq/--sweep");
    o.sizes.clear();  // filled by the loader
  } else if (!sweep.empty()) {
    for (auto n : sweep) o.sizes.emplace_back(seq_q ? seq_q : n, seq_k ? seq_k : n);
  } else if (seq_q || seq_k) {
    o.sizes.emplace_back(seq_q ? seq_q : seq_k, seq_k ? seq_k : seq_q);
  } else {
    for (auto n : spec.default_sweep) o.sizes.emplace_back(n, n);
  }
  if (!o.save_dir.empty() && o.load_dir.empty() && o.sizes.size() != 1)
    throw UsageError("--save writes one case: give --seq (or --seq-q/--seq-k) or --load");
  Problem check = o.problem;
  for (const auto& [nq, nk] : o.sizes) {
    check.seq_q = nq;
    check.seq_k = nk;
    check.validate();
  }
  return o;
}

}  // namespace fa
