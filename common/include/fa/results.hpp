// results.hpp — the results file: one JSON object per measured case (nlohmann-json).
//
// {"schema": "flash-course-results/2", "stage": "02", "command": "...", "date": "...",
//  "git_commit": "...", "device": {...}, "results": [ {stage, variant, pass, ..., status, median_ms, ...} ]}
// Version 2 (this one) added heads_kv, driver_bytes and error_vs_plain and dropped the untyped
// "values" map; docs/results_schema.md lists every field. The plot tool reads versions 1 and 2.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fa/problem.hpp"

namespace fa {

inline constexpr const char* kResultsSchema = "flash-course-results/2";

enum class Status { ok, oom, skipped, failed };
const char* to_string(Status s);

// Where the numbers were measured. CPU stages fill it from the host; GPU stages from the device.
struct RunMetadata {
  std::string device;          // "NVIDIA H100 80GB HBM3" or the CPU model
  std::string cuda_runtime;    // "13.0" or "" on CPU stages
  std::string cuda_driver;     // "13.0" or ""
  std::string git_commit;      // at configure time
  std::string date;            // UTC, ISO 8601
  std::string command;         // as typed
  std::map<std::string, std::string> extra;  // SMs, clocks, memory, ...
};
RunMetadata host_metadata(const std::string& command);  // CPU model name, date, commit
std::string host_device_name();                          // the CPU model name

struct ResultRow {
  std::string stage;           // "02"
  std::string variant;         // "online"
  bool comparison = false;     // measured beside the stage's own variants, never verified (a
                               // previous stage, or stage 11's plain read of the cache)
  Pass pass = Pass::forward;
  std::string device;          // where this row ran, when not the run's device (a CPU stage
                               // measured beside a GPU one); empty: RunMetadata::device
  Problem problem;             // shape, causal, scale, dtype
  Status status = Status::ok;
  std::string note;            // why skipped/oom/failed
  double median_ms = 0.0, min_ms = 0.0, max_ms = 0.0;
  int reps = 0;
  double tflops = 0.0;         // FLOPs as the papers count them / median time
  double gbps = 0.0;           // minimum bytes / median time
  std::int64_t peak_bytes = 0;     // measured peak: everything the run allocated
  std::int64_t extra_bytes = 0;    // measured peak beyond inputs and outputs
  std::int64_t driver_bytes = -1;  // the driver's used-memory change over the run (GPU); -1: not measured
  std::string reference;       // what it was verified against; empty if not verified
  bool verified = false;       // a comparison ran
  bool verification_ok = false;
  std::string verification;    // "all rows" | "64 sampled rows"
  double max_abs_error = 0.0, max_rel_error = 0.0, rel_error = 0.0;  // rel_error: relative Frobenius
  double error_vs_plain = 0.0; // max |got − float64| / max |plain − float64| (docs/tolerance.md)
  std::map<std::string, double> split_ms;  // time per kernel, where a stage measures it
};

// Writes the file; throws UsageError when it cannot.
void write_results_json(const std::string& path, const std::string& stage, const RunMetadata& meta,
                        const std::vector<ResultRow>& rows);

}  // namespace fa
