#include "fa/results.hpp"

#include "fa/files.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <ostream>

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

using nlohmann::ordered_json;

// A measured figure, or null where there is none (not run, or not finite).
ordered_json figure(bool present, double v) { return present && std::isfinite(v) ? ordered_json(v) : ordered_json(); }

ordered_json row_json(const ResultRow& r, const RunMetadata& meta) {
  const Problem& p = r.problem;
  const bool ran = r.status == Status::ok;
  ordered_json j;
  j["stage"] = r.stage;
  j["variant"] = r.variant;
  j["pass"] = to_string(r.pass);
  j["device"] = r.device.empty() ? meta.device : r.device;
  j["cuda_runtime"] = meta.cuda_runtime;
  j["cuda_driver"] = meta.cuda_driver;
  j["git_commit"] = meta.git_commit;
  j["batch"] = p.batch;
  j["heads"] = p.heads;
  j["heads_kv"] = p.kv_heads();
  j["seq_q"] = p.seq_q;
  j["seq_k"] = p.seq_k;
  if (p.packed()) j["seq_lens"] = p.seq_lens;  // a packed batch: Nq = Nk = the longest of them
  j["dim"] = p.dim;
  j["dtype"] = to_string(p.dtype);
  j["causal"] = p.causal;
  j["scale"] = figure(true, p.softmax_scale());
  j["status"] = to_string(r.status);
  j["note"] = r.note;
  j["median_ms"] = figure(ran, r.median_ms);
  j["min_ms"] = figure(ran, r.min_ms);
  j["max_ms"] = figure(ran, r.max_ms);
  j["reps"] = r.reps;
  j["tflops"] = figure(ran, r.tflops);
  j["gbps"] = figure(ran, r.gbps);
  j["flops"] = figure(true, p.flops(r.pass));
  j["peak_bytes"] = ran ? ordered_json(r.peak_bytes) : ordered_json();
  j["extra_bytes"] = ran ? ordered_json(r.extra_bytes) : ordered_json();
  j["driver_bytes"] = ran && r.driver_bytes >= 0 ? ordered_json(r.driver_bytes) : ordered_json();
  j["reference"] = r.reference;
  j["verified"] = r.verified;
  j["verification_ok"] = r.verified ? ordered_json(r.verification_ok) : ordered_json();
  j["verification"] = r.verification;
  j["max_abs_error"] = figure(r.verified, r.max_abs_error);
  j["max_rel_error"] = figure(r.verified, r.max_rel_error);
  j["rel_error"] = figure(r.verified, r.rel_error);
  j["error_vs_plain"] = figure(r.verified && r.error_vs_plain > 0, r.error_vs_plain);  // null: not measured (backward)
  j["comparison"] = r.comparison;
  j["split_ms"] = ordered_json::object();
  for (const auto& [k, v] : r.split_ms) j["split_ms"][k] = figure(true, v);
  return j;
}

}  // namespace

void write_results_json(const std::string& path, const std::string& stage, const RunMetadata& meta,
                        const std::vector<ResultRow>& rows) {
  ordered_json doc;
  doc["schema"] = kResultsSchema;
  doc["stage"] = stage;
  doc["command"] = meta.command;
  doc["date"] = meta.date;
  doc["git_commit"] = meta.git_commit;
  ordered_json device{{"name", meta.device}, {"cuda_runtime", meta.cuda_runtime}, {"cuda_driver", meta.cuda_driver}};
  for (const auto& [k, v] : meta.extra) device[k] = v;
  doc["device"] = device;
  doc["results"] = ordered_json::array();
  for (const ResultRow& r : rows) doc["results"].push_back(row_json(r, meta));
  write_file_checked(path, "", [&](std::ostream& out) {
    // One result per line: diffs of committed results files stay readable.
    out << "{\n";
    std::size_t i = 0;
    for (const auto& [key, value] : doc.items()) {
      out << "  " << ordered_json(key).dump() << ": ";
      if (key == "results") {
        out << "[";
        for (std::size_t r = 0; r < value.size(); ++r)
          out << (r ? "," : "") << "\n    " << value[r].dump(-1, ' ', false, ordered_json::error_handler_t::replace);
        out << "\n  ]";
      } else {
        out << value.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
      }
      out << (++i < doc.size() ? ",\n" : "\n");
    }
    out << "}\n";
  });
}

}  // namespace fa
