// cli.hpp — the command line that every stage executable shares.
//
//   --batch B --heads H --seq N | --seq-q NQ --seq-k NK --dim D --causal --scale S --dtype T
//   --seed S --inputs normal|large-logits|ramp --sweep 512,1024,... --load DIR --save DIR
//   --json FILE --reps R --warmup W --variant NAME --no-verify --help
//
// Bad usage throws UsageError; run_stage() prints its message on one line and exits 2.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fa/problem.hpp"
#include "fa/random.hpp"

namespace fa {

// What a stage accepts and its defaults; the parser checks against it.
struct CliSpec {
  std::string program;                       // "step01_cpu_attention"
  std::string summary;                       // one line: what the stage does
  Problem defaults;                          // batch, heads, dim, causal defaults
  std::vector<std::int64_t> default_sweep;   // the short default run
  std::vector<std::int64_t> dims;            // supported head dims; empty: any
  std::vector<std::string> dtypes{"float32"};
  std::vector<std::string> variants;         // names accepted by --variant; empty: no --variant
  std::vector<std::string> extra_flags;      // stage-specific boolean flags, e.g. "--deterministic"
  std::string notes;                         // extra lines for --help
};

struct Options {
  Problem problem;                                         // everything but the lengths
  std::vector<std::pair<std::int64_t, std::int64_t>> sizes;  // (Nq, Nk) of each case, in order
  std::string load_dir, save_dir, json_path;
  std::string dtype = "float32";
  std::uint64_t seed = 2024;
  InputKind inputs = InputKind::normal;
  int reps = 0;      // 0: the stage's default
  int warmup = -1;   // -1: the stage's default
  bool verify = true;
  bool help = false;
  std::string variant;                  // empty: all variants
  std::vector<std::string> set_flags;   // the extra_flags given
  double mem_limit_gb = 0.0;            // 0: the stage's default
  std::string command_line;             // as typed, for the results file

  bool flag(const std::string& name) const;
};

Options parse_cli(int argc, const char* const* argv, const CliSpec& spec);
std::string usage(const CliSpec& spec);

// Parses "512,1024,2k,1M" style lists; throws UsageError naming the flag.
std::vector<std::int64_t> parse_size_list(const std::string& text, const std::string& flag);
std::int64_t parse_size(const std::string& text, const std::string& flag);

}  // namespace fa
