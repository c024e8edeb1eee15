// tile_report.cu — stage 05's tile table (tile_report.hpp): what skipping saves, from the bounds the
// kernel uses, for every size the run measured.
#include "05_cuda_causal/tile_report.hpp"

#include <cstdio>
#include <string>

#include "05_cuda_causal/flash_causal.cuh"
#include "fa/chart.hpp"

namespace fa::step05 {

void print_tile_counts(std::ostream& os, const std::vector<ResultRow>& rows) {
  Table t;
  t.header = {"N (q x k)", "variant", "K/V tiles loaded", "masked", "stage 04 loads", "loaded / stage 04"};
  for (const ResultRow& r : rows) {
    if (r.stage != "05" || r.status != Status::ok) continue;
    const TileCounts c = count_tiles(r.problem);
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.3f", static_cast<double>(c.loaded) / static_cast<double>(c.dense));
    const std::string n = r.problem.seq_q == r.problem.seq_k
                              ? std::to_string(r.problem.seq_q)
                              : std::to_string(r.problem.seq_q) + "x" + std::to_string(r.problem.seq_k);
    t.rows.push_back({n, r.stage + " " + r.variant, std::to_string(c.loaded), std::to_string(c.masked),
                      std::to_string(c.dense), ratio});
  }
  if (t.rows.empty()) return;
  os << "\n== K/V tiles (Br = Bc = 64): skipped tiles are never loaded\n";
  t.print(os);
}

}  // namespace fa::step05
