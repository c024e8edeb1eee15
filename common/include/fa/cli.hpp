// cli.hpp — the command line that every stage executable shares, on CLI11.
//
//   --batch B --heads H [--heads-kv HKV] --seq N | --seq-q NQ --seq-k NK --dim D --causal --scale S
//   --dtype T --seed S --inputs normal|large-logits|ramp --sweep 512,1024,... --load DIR --save DIR
//   --json FILE --reps R --warmup W --variant NAME --no-verify --mem-limit-gb G --help
//
// A stage adds its own flags to `app()` before `parse`, each bound to a field of the stage's own
// options struct (say, stage 06's `--deterministic` to `BackwardOptions::deterministic`): common/
// knows no stage's flags, and stage code gets typed options, not strings. Bad usage prints one
// line, "PROGRAM: error: WHY", and parse() returns exit code 2; --help prints the help and 0.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fa/problem.hpp"
#include "fa/random.hpp"

namespace fa {

// What a stage accepts and its defaults.
struct CliSpec {
  std::string program;                       // "step01_cpu_attention"
  std::string summary;                       // one line: what the stage does
  Problem defaults;                          // batch, heads, dim, causal defaults
  std::vector<std::int64_t> default_sweep;   // the short default run
  std::int64_t default_seq_q = 0;            // Nq when only keys are given (a sweep, --seq-k); 0: Nq = Nk
  Supports supports;                         // dtypes, head dims, GQA, variable lengths
  std::vector<std::string> variants;         // names accepted by --variant; empty: no --variant
  std::string notes;                         // extra lines for --help
};

// The parsed command line, common part.
struct RunOptions {
  Problem problem;                                           // everything but the lengths
  std::vector<std::pair<std::int64_t, std::int64_t>> sizes;  // (Nq, Nk) of each case, in order
  std::string load_dir, save_dir, json_path;
  std::uint64_t seed = 2024;
  InputKind inputs = InputKind::normal;
  int reps = 0;      // 0: the stage's default
  int warmup = -1;   // -1: the stage's default
  bool verify = true;
  std::string variant;         // empty: all variants
  double mem_limit_gb = 0.0;   // 0: the stage's default
  std::string command_line;    // as typed, for the results file
};

class StageCli {
 public:
  explicit StageCli(CliSpec spec);
  CLI::App& app() { return *app_; }  // add the stage's own flags here, before parse()
  // nullopt: go on and run; otherwise the exit code (0 after --help, 2 after bad usage, both
  // already printed). Also checks the problem against spec.supports and the --json/--save paths.
  std::optional<int> parse(int argc, const char* const* argv);
  const CliSpec& spec() const { return spec_; }
  RunOptions& options() { return options_; }
  const RunOptions& options() const { return options_; }

 private:
  void require_values() const;  // no option given an empty value; throws UsageError
  void finish();  // from the raw flags to options_.sizes; throws UsageError
  CliSpec spec_;
  std::unique_ptr<CLI::App> app_;
  RunOptions options_;
  std::string seq_, seq_q_, seq_k_, sweep_, dtype_ = "float32", inputs_ = "normal", seq_lens_, seed_;
  double scale_ = 0.0;  // read as a double, so that a value float32 cannot hold is seen and refused
};

// Parses "512,1024,2k,1M" style lists; throws UsageError naming the flag.
std::vector<std::int64_t> parse_size_list(const std::string& text, const std::string& flag);
std::int64_t parse_size(const std::string& text, const std::string& flag);

// Checks before a long run that its files can be written: creates the parent folders of a
// --json file (and the --save folder) and tries to open them. Throws UsageError.
void check_writable_file(const std::string& path, const std::string& flag);
void check_writable_dir(const std::string& dir, const std::string& flag);

}  // namespace fa
