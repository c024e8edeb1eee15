// stage.hpp — the harness that every stage executable runs.
//
// A stage's main.cpp describes itself in a StageDefinition: its variants (its own forward, and the
// previous stage's, measured beside it for the charts), the reference it is verified against, and
// its CLI defaults. run_stage() then does the same thing for every stage:
//
//   parse the CLI ─► for each size: fresh seeded inputs (or --load)
//                      ─► run each variant on NaN-poisoned outputs: time (median), memory (measured)
//                      ─► verify our variants against the reference (all rows, or sampled rows)
//                  ─► table, memory chart, time chart ─► --json, --save ─► exit code
//
// Exit codes: 0 ok, 1 a verification failed or a run crashed, 2 bad usage/input, 77 skipped.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "fa/cli.hpp"
#include "fa/compare.hpp"
#include "fa/memory.hpp"
#include "fa/results.hpp"
#include "fa/tensor.hpp"
#include "fa/timing.hpp"

namespace fa {

inline constexpr int kExitOk = 0;
inline constexpr int kExitVerifyFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitSkipped = 77;

struct RunConfig {
  int warmup = 1;
  int reps = 5;
  std::int64_t mem_limit_bytes = 0;  // 0: no limit
  const Options* options = nullptr;  // stage-specific flags
};

// What one variant measured at one size.
struct Measurement {
  Status status = Status::ok;
  std::string note;
  TimingStats time;
  std::int64_t peak_bytes = 0;    // everything the run allocated, measured
  std::int64_t extra_bytes = 0;   // beyond inputs and outputs, measured
  std::map<std::string, double> split_ms;
  std::map<std::string, double> values;
};

// Runs one forward on host data: writes `out` (already poisoned with NaN), times and measures.
using RunFn = std::function<Measurement(const Problem&, const AttentionData&, AttentionResult&, const RunConfig&)>;
// A plain forward on host data, for references.
using ForwardFn = std::function<void(const Problem&, const AttentionData&, AttentionResult&)>;

struct Variant {
  std::string stage;          // "02"
  std::string name;           // "online"
  bool ours = true;           // false: a comparison (the previous stage), measured but not verified
  std::int64_t max_seq = 0;   // longer sequences are reported as skipped (too slow for a sweep); 0: none
  bool on_host = false;       // runs on the CPU: its rows name the host CPU, also in a GPU stage
  RunFn run;
  std::string label() const { return stage + " " + name; }
};

struct Reference {
  std::string name;                 // "01 eigen", "float64 loop"
  ForwardFn forward;
  Tolerance tol = kFloat32Tol;
};

struct StageDefinition {
  std::string id;                   // "02"
  CliSpec cli;
  std::vector<Variant> variants;
  Reference reference;              // verifies all rows while the problem is small enough ...
  double max_full_reference_flops = 2e9;
  std::optional<Reference> row_reference;  // ... and beyond, sampled rows (default: `reference`)
  int sampled_rows = 48;
  int default_warmup = 1;
  int default_reps = 5;
  double default_mem_limit_gb = 8.0;
  std::function<std::string()> skip_reason;                    // non-empty: exit 77 (no GPU)
  std::function<RunMetadata(const std::string&)> metadata;     // default: host_metadata
  std::function<void(std::ostream&, const std::vector<ResultRow>&)> extra_report;
};

int run_stage(int argc, const char* const* argv, const StageDefinition& def);

// A variant for a host (CPU) stage function of the common signature. Its workspace meter measures
// the stage's own allocations; inputs and outputs belong to the harness.
using HostForward = void (*)(const Problem&, const AttentionInputs&, const AttentionOutputs&, MemoryMeter&);
Variant host_variant(std::string stage, std::string name, bool ours, HostForward fn, std::int64_t max_seq = 0);
ForwardFn host_forward(HostForward fn);

// The verification itself, also used by tests: compare O and LSE of `got` with `ref`.
struct Verification {
  CompareReport o, lse;
  std::string how;  // "all rows" or "48 sampled rows"
  bool ok() const { return o.ok() && lse.ok(); }
};
Verification verify_full(const AttentionResult& got, const AttentionResult& ref, Tolerance tol);
// The tolerance that follows the arithmetic for these inputs. Large logits (scores of 50 to 200)
// carry ~100x the absolute rounding error of scores of ~1 (float32 rounds a score s to about
// u·|s|·√D), and exp turns that into the same relative error of every weight P_ij: O is then
// good to ~1e-4, not ~1e-6, in any float32 implementation. The tolerance widens 10x for them.
Tolerance tolerance_for(Tolerance base, InputKind inputs);
// The tolerance for outputs that are float32 sums over Nk keys. Their rounding error grows like
// eps·√Nk for independent roundings (eps = 2⁻²⁴): the course's float32 tolerance (2e-5) covers
// it up to Nk ≈ 30000; beyond, 2·eps·√Nk (1.2e-4 at Nk = 1M, where stage 04 measured one element
// of 3200 off by 6.3e-5). run_stage applies it to every comparison.
Tolerance tolerance_for_keys(Tolerance base, std::int64_t nk);
Verification verify_sampled(const Problem& p, const AttentionData& in, const AttentionResult& got,
                            const ForwardFn& row_forward, Tolerance tol, int count, std::uint64_t seed);

// ---- Pieces of the harness, shared with the backward harness (fa/backward.hpp) -----------------

// Runs one variant at one size. A failure becomes the measurement's status, never a crash:
// OutOfMemory or bad_alloc → oom, UsageError (a shape the variant cannot run) → skipped, any other
// exception → failed, each with its message as the note.
Measurement measure(const std::function<Measurement()>& run);
// Copies a measurement into its row; TFLOP/s and GB/s from the FLOPs and the minimum bytes.
void record(ResultRow& row, const Measurement& m, double flops, double min_bytes);
// One line per run: "   04 flash: ok  1.78 ms  38.7 TFLOP/s  extra memory 0 B", or why not.
void print_measurement(std::ostream& os, const std::string& label, bool ours, const ResultRow& row,
                       const std::string& memory_words = "extra memory");
// The table of every case and variant.
void print_results_table(std::ostream& os, const std::vector<ResultRow>& rows, const std::string& time_header);
// Writes the results file; on failure prints "PROGRAM: error: ..." and returns false (exit 2).
bool write_results(const std::string& program, const std::string& path, const std::string& stage,
                   const RunMetadata& meta, const std::vector<ResultRow>& rows);

// Loads q.npy, k.npy, v.npy from a folder, checks their shapes against each other, and returns
// the problem they describe (batch, heads, lengths and dim from the files).
AttentionData load_inputs(const std::string& dir, Problem& problem);
void save_outputs(const std::string& dir, const AttentionResult& out);

}  // namespace fa
