// ring_timeline.cu — the measured timeline of one ring run as JSON (see ring_timeline.cuh).
#include "13_ring_attention/lab/ring_timeline.cuh"

#include <algorithm>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "fa/cli.hpp"
#include "fa/cuda/device.cuh"

namespace fa::step13 {

int write_ring_timeline(const RunOptions& opt, const RingOptions& ring, Pass pass, const std::string& path) {
  if (const std::string why = ring_refusal(ring); !why.empty()) {
    std::cout << "skipped: " << why << "\n";
    return kExitSkipped;
  }
  try {
    check_writable_file(path, "--timeline");
    Problem p = opt.problem;
    p.seq_q = opt.sizes.back().first;
    p.seq_k = opt.sizes.back().second;
    const AttentionData in = make_case_inputs(p, pass, opt.seed, opt.inputs);
    RingAttention r(p, ring, pass);
    r.load(in);
    for (int run = 0; run < 2; ++run) {  // a warm-up, then the recorded run
      r.record_timeline(run == 1);
      r.forward();
      if (pass == Pass::backward) r.backward();
    }
    const std::vector<RingAttention::Span> spans = r.timeline();
    nlohmann::ordered_json doc = {
        {"device", query_device(0).name}, {"gpus", ring.gpus},      {"split", to_string(ring.split)},
        {"transport", to_string(ring.transport)}, {"overlap", ring.overlap}, {"pass", to_string(pass)},
        {"batch", p.batch},  {"heads", p.heads}, {"seq", p.seq_q},  {"dim", p.dim},
        {"causal", p.causal}, {"dtype", to_string(p.dtype)}, {"command", opt.command_line}};
    doc["spans"] = nlohmann::ordered_json::array();
    for (const RingAttention::Span& s : spans)
      doc["spans"].push_back({{"rank", s.rank}, {"lane", s.lane}, {"what", s.what}, {"step", s.step},
                              {"start_ms", s.start_ms}, {"end_ms", s.end_ms}});
    std::ofstream(path) << doc.dump(2) << "\n";
    for (int rank = 0; rank < ring.gpus; ++rank) {
      double compute = 0.0, hops = 0.0, end = 0.0;
      for (const RingAttention::Span& s : spans)
        if (s.rank == rank) {
          (s.lane == "compute" ? compute : hops) += s.end_ms - s.start_ms;
          end = std::max(end, s.end_ms);
        }
      std::cout << "rank " << rank << ": computing " << compute << " ms, hops " << hops << " ms, last step ends at " << end
                << " ms\n";
    }
    std::cout << "timeline: " << path << "\n";
    return kExitOk;
  } catch (const UsageError& e) {
    std::cerr << "step13_ring_attention: error: " << e.what() << "\n";
    return kExitUsage;
  }
}

}  // namespace fa::step13
