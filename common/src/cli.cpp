#include "fa/cli.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>

#include "fa/files.hpp"

namespace fa {

std::int64_t parse_size(const std::string& text, const std::string& flag) {
  std::string digits = text;
  std::int64_t mult = 1;
  if (!digits.empty() && (digits.back() == 'k' || digits.back() == 'K')) mult = 1024, digits.pop_back();
  else if (!digits.empty() && (digits.back() == 'm' || digits.back() == 'M')) mult = 1024 * 1024, digits.pop_back();
  std::int64_t value = 0;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || ec != std::errc() || ptr != digits.data() + digits.size() || value < 1 ||
      value > (std::int64_t{1} << 40) / mult)
    throw UsageError(flag + " expects a positive integer up to 2^40 (k and M suffixes allowed), got '" + text + "'");
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

void check_writable_file(const std::string& path, const std::string& flag) {
  const std::filesystem::path file(path);
  std::error_code ec;
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path(), ec);
  if (ec) throw UsageError(flag + " " + path + ": cannot create its folder (" + ec.message() + ")");
  if (std::filesystem::is_directory(file, ec)) throw UsageError(flag + " " + path + ": is a folder");
  require_writable_kind(path, flag);  // before the probe: opening a FIFO would wait for a reader
  const bool existed = std::filesystem::exists(file, ec);
  {
    std::ofstream probe(path, std::ios::app);  // opens without truncating what is there
    if (!probe) throw UsageError(flag + " " + path + ": cannot open for writing");
  }
  if (!existed) std::filesystem::remove(file, ec);
}

void check_writable_dir(const std::string& dir, const std::string& flag) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw UsageError(flag + " " + dir + ": cannot create the folder" + (ec ? " (" + ec.message() + ")" : ""));
  check_writable_file((std::filesystem::path(dir) / ".fa_write_probe").string(), flag);
  // The files --save writes (fa/stage.hpp's save_outputs), before a long run rather than after it.
  for (const char* name : {"o.npy", "lse.npy", "dq.npy", "dk.npy", "dv.npy", "do.npy"})
    require_writable_kind((std::filesystem::path(dir) / name).string(), flag);
}

StageCli::StageCli(CliSpec spec) : spec_(std::move(spec)), app_(std::make_unique<CLI::App>()) {
  options_.problem = spec_.defaults;
  CLI::App& a = *app_;
  a.name(spec_.program);
  a.description(spec_.summary);
  std::string sweep;
  for (auto n : spec_.default_sweep) sweep += (sweep.empty() ? "" : ",") + std::to_string(n);
  std::string dtypes, dims;
  for (DType t : spec_.supports.dtypes) dtypes += (dtypes.empty() ? "" : ", ") + std::string(to_string(t));
  for (auto d : spec_.supports.dims) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
  a.footer("exit codes: 0 ok, 1 verification failed, 2 bad usage or input, 77 skipped (no suitable CUDA device)" +
           (spec_.notes.empty() ? std::string() : "\n\n" + spec_.notes));
  a.get_formatter()->column_width(26);

  Problem& p = options_.problem;
  // Sizes accept k and M suffixes (--seq 16k), so they are parsed by parse_size, not by CLI11.
  auto size_option = [&a](const std::string& name, std::int64_t& target, const std::string& help) {
    a.add_option_function<std::string>(
         name, [&target, name](const std::string& text) { target = parse_size(text, name); }, help)
        ->type_name("N")
        ->group("problem");
  };
  size_option("--batch", p.batch, "batch size B (default " + std::to_string(p.batch) + ")");
  size_option("--heads", p.heads, "query heads H (default " + std::to_string(p.heads) + ")");
  size_option("--heads-kv", p.heads_kv, "key/value heads Hkv (H a multiple of it; default H)");
  a.add_option("--seq", seq_, "one length N for queries and keys (instead of a sweep)")->type_name("N")->group("problem");
  a.add_option("--seq-q", seq_q_, "query length Nq")->type_name("N")->group("problem");
  a.add_option("--seq-k", seq_k_, "key length Nk")->type_name("N")->group("problem");
  a.add_option("--seq-lens", seq_lens_, "a packed variable-length batch: L1,L2,... (stage 12)")->type_name("LIST")->group("problem");
  size_option("--dim", p.dim,
              "head dimension D (default " + std::to_string(p.dim) + (dims.empty() ? "" : "; supported: " + dims) + ")");
  a.add_flag("--causal", p.causal, "query i sees key j iff j <= i + (Nk - Nq)")->group("problem");
  a.add_option("--scale", scale_, "softmax scale (default 1/sqrt(D))")->group("problem");
  dtype_ = to_string(spec_.defaults.dtype);  // the stage's default (stage 07: bfloat16)
  a.add_option("--dtype", dtype_, "element type: " + dtypes)->capture_default_str()->group("problem");
  seed_ = std::to_string(options_.seed);
  a.add_option("--seed", seed_, "seed of the random inputs (0 to 2^64-1)")->capture_default_str()->group("problem");
  a.add_option("--inputs", inputs_, "normal | large-logits | ramp")->capture_default_str()->group("problem");
  a.add_option("--sweep", sweep_, "sequence lengths to run (default " + sweep + "; k and M suffixes)")->type_name("LIST")->group("run");
  a.add_option("--reps", options_.reps, "timed repetitions per case (median reported)")->group("run");
  a.add_option("--warmup", options_.warmup, "untimed runs before timing")->group("run");
  a.add_flag_callback("--no-verify", [this] { options_.verify = false; }, "skip the verification")->group("run");
  a.add_option("--mem-limit-gb", options_.mem_limit_gb, "treat allocations beyond G GiB as out of memory")
      ->group("run");
  if (!spec_.variants.empty()) {
    std::string names;
    for (const auto& v : spec_.variants) names += (names.empty() ? "" : ", ") + v;
    a.add_option("--variant", options_.variant, "run only one of: " + names)
        ->check(CLI::IsMember(spec_.variants))->group("run");
  }
  a.add_option("--load", options_.load_dir, "read q.npy k.npy v.npy ([B,H,N,D], float32 or float16)")->group("files");
  a.add_option("--save", options_.save_dir, "write o.npy and lse.npy (float32) of a single-size run")->type_name("DIR")->group("files");
  a.add_option("--json", options_.json_path, "write the results (one object per measured case)")->type_name("FILE")->group("files");
}

std::optional<int> StageCli::parse(int argc, const char* const* argv) {
  options_.command_line.clear();
  for (int i = 0; i < argc; ++i) options_.command_line += (i ? " " : "") + std::string(argv[i]);
  try {
    app_->parse(argc, argv);
    require_values();
    finish();
  } catch (const CLI::CallForHelp&) {
    std::cout << app_->help() << std::flush;
    if (!std::cout) {  // the help is the answer asked for: one that could not be written is no success
      std::cerr << spec_.program << ": error: could not write the help to standard output\n";
      return 2;
    }
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << spec_.program << ": error: " << one_line(e.what()) << " (see --help)\n";
    return 2;
  } catch (const UsageError& e) {
    std::cerr << spec_.program << ": error: " << e.what() << "\n";
    return 2;
  }
  return std::nullopt;
}

void StageCli::require_values() const {
  // CLI11 takes `--load ""` as an empty value, which the stages would read as "not given" (random
  // inputs instead of the files, no results file): an empty value is refused, for every option.
  for (const CLI::Option* opt : app_->get_options())
    if (opt->get_expected_min() > 0)
      for (const std::string& value : opt->results())
        if (value.empty()) throw UsageError(opt->get_name() + " needs a value; it was given an empty one");
}

void StageCli::finish() {
  RunOptions& o = options_;
  Problem& p = o.problem;
  p.dtype = parse_dtype(dtype_);
  o.inputs = parse_input_kind(inputs_);
  // A stage's default Hkv (stage 11: 32 query heads on 8) goes with its default Hq: --heads alone
  // means that many heads of their own, as the help says.
  if (app_->count("--heads") > 0 && app_->count("--heads-kv") == 0) p.heads_kv = 0;
  // 0 reps, -1 warmups and 0 GiB are the "not given" values that pick the stage's defaults: given,
  // they are refused rather than read as the default. The limit in bytes must fit 64 bits.
  if (app_->count("--reps") > 0 && (o.reps < 1 || o.reps > 100000))
    throw UsageError("--reps must be in 1..100000, got " + std::to_string(o.reps));
  if (app_->count("--warmup") > 0 && (o.warmup < 0 || o.warmup > 1000))
    throw UsageError("--warmup must be in 0..1000, got " + std::to_string(o.warmup));
  if (app_->count("--mem-limit-gb") > 0 && !(o.mem_limit_gb > 0 && o.mem_limit_gb <= 1 << 30)) {
    char got[32];
    std::snprintf(got, sizeof got, "%g", o.mem_limit_gb);
    throw UsageError(std::string("--mem-limit-gb must be above 0 and at most 2^30 GiB, got ") + got);
  }
  // The scale is a float32 and 0 means the default, so a value that rounds to 0 (or to inf) would
  // run the default silently: refused. So is an explicit 0.
  if (app_->count("--scale") > 0) {
    if (!(scale_ >= std::numeric_limits<float>::min() && scale_ <= std::numeric_limits<float>::max())) {
      char got[32];
      std::snprintf(got, sizeof got, "%g", scale_);
      throw UsageError(std::string("--scale must be a positive float32, from 1.2e-38 to 3.4e+38, got ") + got);
    }
    p.scale = static_cast<float>(scale_);
  }
  {  // the seed: digits only, within 64 bits (CLI11 would wrap -1 and saturate 2^64)
    std::uint64_t seed = 0;
    const auto [ptr, ec] = std::from_chars(seed_.data(), seed_.data() + seed_.size(), seed);
    if (seed_.empty() || ec != std::errc() || ptr != seed_.data() + seed_.size())
      throw UsageError("--seed expects an integer from 0 to 18446744073709551615, got '" + seed_ + "'");
    o.seed = seed;
  }

  const std::int64_t seq = seq_.empty() ? 0 : parse_size(seq_, "--seq");
  std::int64_t seq_q = seq_q_.empty() ? 0 : parse_size(seq_q_, "--seq-q");
  std::int64_t seq_k = seq_k_.empty() ? 0 : parse_size(seq_k_, "--seq-k");
  const std::vector<std::int64_t> sweep = sweep_.empty() ? std::vector<std::int64_t>{} : parse_size_list(sweep_, "--sweep");
  if (seq && (seq_q || seq_k)) throw UsageError("give either --seq or --seq-q/--seq-k, not both");
  if (!sweep.empty() && seq) throw UsageError("give either --seq or --sweep, not both");
  if (seq) seq_q = seq_k = seq;

  // A decoding stage's Nq (stage 11: one new query against the cache) when only keys are given.
  const std::int64_t dq = spec_.default_seq_q;
  o.sizes.clear();
  if (!seq_lens_.empty()) {  // a packed batch: one case, its lengths given
    if (seq || seq_q || seq_k || !sweep.empty())
      throw UsageError("--seq-lens gives the lengths of a packed batch: drop --seq, --seq-q, --seq-k and --sweep");
    if (!o.load_dir.empty()) throw UsageError("--seq-lens and --load: the lengths come from the files");
    p = packed_problem(p, parse_size_list(seq_lens_, "--seq-lens"));
    o.sizes.emplace_back(p.seq_q, p.seq_k);
  } else if (!o.load_dir.empty()) {
    if (!sweep.empty() || seq_q || seq_k) throw UsageError("--load takes its shapes from the files; drop --seq/--sweep");
  } else if (!sweep.empty()) {
    for (auto n : sweep) o.sizes.emplace_back(seq_q ? seq_q : (seq_k || !dq ? n : dq), seq_k ? seq_k : n);
  } else if (seq_q || seq_k) {
    o.sizes.emplace_back(seq_q ? seq_q : (dq && !seq ? dq : seq_k), seq_k ? seq_k : seq_q);
  } else {
    for (auto n : spec_.default_sweep) o.sizes.emplace_back(dq ? dq : n, n);
  }
  if (!o.save_dir.empty() && o.load_dir.empty() && o.sizes.size() != 1)
    throw UsageError("--save writes one case: give --seq (or --seq-q/--seq-k) or --load");
  Problem check = p;
  for (const auto& [nq, nk] : o.sizes) {
    check.seq_q = nq;
    check.seq_k = nk;
    check.require(spec_.supports);
  }
  if (o.sizes.empty()) p.require(spec_.supports);  // --load: the files' sizes are checked later
  // The output files, before a long run rather than after it.
  if (!o.json_path.empty()) check_writable_file(o.json_path, "--json");
  if (!o.save_dir.empty()) check_writable_dir(o.save_dir, "--save");
}

}  // namespace fa
