// stage.hpp — the harness that every stage executable runs, forward or backward.
//
// A stage's main parses its command line (fa::StageCli, with the stage's own typed flags), then
// describes itself in a StageDefinition: the pass it measures, its variants (its own kernels and
// the previous stage's, measured beside them for the charts) and what it is verified against.
// run_stage() then does the same for every stage:
//
//   for each size: fresh seeded inputs (or --load), checked finite
//     ─► each variant on NaN-poisoned outputs: time (median), memory (measured)
//     ─► verify our variants: float64 on all or sampled rows, with the tolerance the problem
//        allows (fa/verify.hpp), and the previous stage on every row where it runs
//   ─► table, memory chart, time chart ─► --json, --save ─► exit code
//
// Exit codes: 0 ok, 1 a verification failed, a run failed, or nothing ran; 2 bad usage/input
// (also when the stage refused every case asked for); 77 skipped (no suitable GPU).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "fa/cli.hpp"
#include "fa/memory.hpp"
#include "fa/results.hpp"
#include "fa/tensor.hpp"
#include "fa/timing.hpp"
#include "fa/verify.hpp"

namespace fa {

inline constexpr int kExitOk = 0;
inline constexpr int kExitVerifyFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitSkipped = 77;

struct RunConfig {
  int warmup = 1;
  int reps = 5;
  std::int64_t mem_limit_bytes = 0;  // 0: no limit
};

// What one variant measured at one size.
struct Measurement {
  Status status = Status::ok;
  std::string note;
  TimingStats time;
  std::int64_t peak_bytes = 0;     // everything the run allocated, measured
  std::int64_t extra_bytes = 0;    // beyond inputs, outputs (and gradients), measured
  std::int64_t driver_bytes = -1;  // the driver's figure for the same run (GPU); -1: none
  std::map<std::string, double> split_ms;  // per kernel, where the stage marks its kernels
};

// Runs one case: writes `out` (already poisoned with NaN: O and LSE, and for a backward case dQ,
// dK, dV), times and measures. The pass decides what is timed: the forward, or the backward
// after one forward.
using RunFn = std::function<Measurement(const Problem&, const AttentionData&, AttentionResult&, const RunConfig&)>;

struct Variant {
  std::string stage;          // "02"
  std::string name;           // "online"
  bool ours = true;           // false: a comparison (the previous stage), measured but not verified
  std::int64_t max_seq = 0;   // longer sequences are reported as skipped (too slow for a sweep); 0: none
  bool on_host = false;       // runs on the CPU: its rows name the host CPU, also in a GPU stage
  RunFn run;
  std::string label() const { return stage + " " + name; }
};

struct StageDefinition {
  std::string id;                       // "02"
  Pass pass = Pass::forward;
  std::vector<Variant> variants;
  VerifyPlan verify;                    // float64 rows and the previous stage (fa/verify.hpp)
  int default_warmup = 1;
  int default_reps = 5;
  double default_mem_limit_gb = 8.0;    // host stages: the workspace limit; 0: none
  // A stage may reshape each case after the CLI (stage 06's --paper-shapes: B·N, H·D fixed).
  std::function<Problem(const Problem&)> shape_case;
  std::string shape_note;               // what shape_case does, for the printed results header
  std::function<std::string()> skip_reason;                 // non-empty: exit 77 (no suitable GPU)
  std::function<RunMetadata(const std::string&)> metadata;  // default: host_metadata
  std::function<void(std::ostream&, const std::vector<ResultRow>&)> extra_report;
};

int run_stage(const StageCli& cli, const StageDefinition& def);

// --paper-shapes, for the stages measured against the FlashAttention papers' sweep (B·N = 16384
// tokens and H·D = 2048 at every N: FA2's benchmarks, docs/anchors.md): paper_shape reshapes one
// case (B = 16384 / max(Nq, Nk), at least 1; H = Hkv = 2048 / D); use_paper_shapes sets
// def.shape_case and def.shape_note to it, or returns why it cannot (--load given, or D not
// dividing 2048) as the one line of a usage error, setting nothing.
Problem paper_shape(Problem p);
std::string use_paper_shapes(const RunOptions& opt, StageDefinition& def);

// A variant for a host (CPU) stage function of the common signature. Its workspace meter measures
// the stage's own allocations; inputs and outputs belong to the harness.
using HostForward = void (*)(const Problem&, const AttentionInputs&, const AttentionOutputs&, MemoryMeter&);
Variant host_variant(std::string stage, std::string name, bool ours, HostForward fn, std::int64_t max_seq = 0);
ForwardFn host_forward(HostForward fn);

// Runs `run`, turning failures into the measurement's status, never a crash: OutOfMemory or
// bad_alloc → oom, UsageError (a shape the variant cannot run) → skipped, anything else → failed.
Measurement measure(const std::function<Measurement()>& run);

// Inputs of one case: fresh seeded Q, K, V (and dO for a backward case), refused with a
// UsageError if any element (or a scaled score) is not finite; --load DIR reads q.npy, k.npy,
// v.npy (and do.npy, drawn from the seed when missing) in the problem's dtype. Refused with
// OutOfMemory when the host lacks the memory the case needs (less without for_verification).
AttentionData make_case_inputs(const Problem& p, Pass pass, std::uint64_t seed, InputKind kind,
                               bool for_verification = true);
AttentionData load_inputs(const std::string& dir, Problem& problem, Pass pass, std::uint64_t seed,
                          bool* generated_do = nullptr);
// --save DIR: o.npy, lse.npy (and dq, dk, dv, do for a backward case), as float32.
void save_outputs(const std::string& dir, const AttentionData& in, const AttentionResult& out, Pass pass);
// UsageError naming the tensor and the first element (b, h, i, d) that is NaN or ±inf.
void require_finite(const HostTensor& t, const char* name);

}  // namespace fa
