#include "fa/results.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

#ifndef FA_GIT_COMMIT
#define FA_GIT_COMMIT "unknown"
#endif

namespace fa {

const char* to_string(Status s) {
  switch (s) {
    case Status::ok: return "ok";
    case Status::oom: return "oom";
    case Status::skipped: return "skipped";
    case Status::failed: return "failed";
  }
  return "?";
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

std::string host_device_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "host CPU";
}

RunMetadata host_metadata(const std::string& command) {
  RunMetadata m;
  m.command = command;
  m.git_commit = FA_GIT_COMMIT;
  m.device = host_device_name();
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  m.date = buf;
  return m;
}

namespace {

std::string num(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}
std::string str(const std::string& s) { return "\"" + json_escape(s) + "\""; }

}  // namespace

void write_results_json(const std::string& path, const std::string& stage, const RunMetadata& meta,
                        const std::vector<ResultRow>& rows) {
  std::ostringstream j;
  j << "{\n  \"schema\": \"flash-course-results/1\",\n  \"stage\": " << str(stage)
    << ",\n  \"command\": " << str(meta.command) << ",\n  \"date\": " << str(meta.date)
    << ",\n  \"git_commit\": " << str(meta.git_commit) << ",\n  \"device\": {\"name\": " << str(meta.device)
    << ", \"cuda_runtime\": " << str(meta.cuda_runtime) << ", \"cuda_driver\": " << str(meta.cuda_driver);
  for (const auto& [k, v] : meta.extra) j << ", " << str(k) << ": " << str(v);
  j << "},\n  \"results\": [";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const ResultRow& r = rows[i];
    const Problem& p = r.problem;
    j << (i ? "," : "") << "\n    {\"stage\": " << str(r.stage) << ", \"variant\": " << str(r.variant)
      << ", \"pass\": " << str(r.pass) << ", \"device\": " << str(r.device.empty() ? meta.device : r.device)
      << ", \"cuda_runtime\": " << str(meta.cuda_runtime) << ", \"cuda_driver\": " << str(meta.cuda_driver)
      << ", \"git_commit\": " << str(meta.git_commit)
      << ", \"batch\": " << p.batch << ", \"heads\": " << p.heads << ", \"seq_q\": " << p.seq_q
      << ", \"seq_k\": " << p.seq_k << ", \"dim\": " << p.dim << ", \"dtype\": " << str(r.dtype)
      << ", \"causal\": " << (p.causal ? "true" : "false") << ", \"scale\": " << num(p.softmax_scale())
      << ", \"status\": " << str(to_string(r.status)) << ", \"note\": " << str(r.note);
    const bool ran = r.status == Status::ok;
    j << ", \"median_ms\": " << (ran ? num(r.median_ms) : "null")
      << ", \"min_ms\": " << (ran ? num(r.min_ms) : "null") << ", \"max_ms\": " << (ran ? num(r.max_ms) : "null")
      << ", \"reps\": " << r.reps << ", \"tflops\": " << (ran ? num(r.tflops) : "null")
      << ", \"gbps\": " << (ran ? num(r.gbps) : "null") << ", \"flops\": " << num(r.pass == "bwd" ? p.flops_backward() : p.flops_forward())
      << ", \"peak_bytes\": " << (ran ? std::to_string(r.peak_bytes) : "null")
      << ", \"extra_bytes\": " << (ran ? std::to_string(r.extra_bytes) : "null")
      << ", \"reference\": " << str(r.reference) << ", \"verified\": " << (r.verified ? "true" : "false")
      << ", \"verification_ok\": " << (r.verified ? (r.verification_ok ? "true" : "false") : "null")
      << ", \"verification\": " << str(r.verification)
      << ", \"max_abs_error\": " << (r.verified ? num(r.max_abs_error) : "null")
      << ", \"max_rel_error\": " << (r.verified ? num(r.max_rel_error) : "null")
      << ", \"rel_error\": " << (r.verified ? num(r.rel_error) : "null");
    j << ", \"split_ms\": {";
    bool first = true;
    for (const auto& [k, v] : r.split_ms) j << (first ? "" : ", ") << str(k) << ": " << num(v), first = false;
    j << "}, \"values\": {";
    first = true;
    for (const auto& [k, v] : r.values) j << (first ? "" : ", ") << str(k) << ": " << num(v), first = false;
    j << "}}";
  }
  j << "\n  ]\n}\n";
  std::ofstream out(path);
  if (!out) throw UsageError(path + ": cannot open for writing");
  out << j.str();
  if (!out) throw UsageError(path + ": write failed");
}

}  // namespace fa
