// step05_cuda_causal — runs stage 05 (causal with tile skipping) beside stage 04 (the mask applied
// to every tile), verifies it against stage 04 (every row, on the GPU; sampled float64 rows where
// asked), and charts memory and time. Two variants of this stage: `skip` starts the heaviest Q
// tiles first, `skip-in-order` keeps the natural order, so that the effect of the order is measured.
//
//   build/steps/05_cuda_causal/step05_cuda_causal                          the default sweep (causal)
//   build/steps/05_cuda_causal/step05_cuda_causal --batch 4 --heads 32 --seq 4096 --count-tiles
//   build/steps/05_cuda_causal/step05_cuda_causal --seq-q 300 --seq-k 1000   Nq < Nk: a KV cache
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>

#include "04_cuda_flash_forward/flash_forward.cuh"
#include "05_cuda_causal/flash_causal.cuh"
#include "fa/chart.hpp"
#include "fa/cli.hpp"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/reference.hpp"
#include "fa/stage.hpp"

namespace {

fa::DeviceForward with_order(bool heavy_first) {
  return [heavy_first](const fa::Problem& p, const fa::AttentionInputs& in, const fa::AttentionOutputs& out,
                       fa::DeviceContext& ctx) {
    fa::step05::CausalOptions opt;
    opt.heavy_first = heavy_first;
    opt.count_tiles = ctx.options && ctx.options->flag("--count-tiles");
    fa::step05::attention_forward_with(p, in, out, ctx, opt);
  };
}

// The tiles each size loads, against stage 04's every-tile count; measured on the device with
// --count-tiles, else from the kernel's formula.
void print_tiles(std::ostream& os, const std::vector<fa::ResultRow>& rows) {
  fa::Table t;
  t.header = {"N (q x k)", "variant", "K/V tiles loaded", "masked", "stage 04 loads", "loaded / stage 04", "counted by"};
  for (const fa::ResultRow& r : rows) {
    if (r.stage != "05" || r.status != fa::Status::ok) continue;
    const fa::step05::TileCounts c = fa::step05::count_tiles(r.problem);
    const auto loaded_it = r.values.find("kv_tiles_loaded"), masked_it = r.values.find("kv_tiles_masked");
    const bool measured = loaded_it != r.values.end();
    const double loaded = measured ? loaded_it->second : static_cast<double>(c.loaded);
    const double masked = measured ? masked_it->second : static_cast<double>(c.masked);
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.3f", loaded / static_cast<double>(c.dense));
    const std::string n = r.problem.seq_q == r.problem.seq_k
                              ? std::to_string(r.problem.seq_q)
                              : std::to_string(r.problem.seq_q) + "x" + std::to_string(r.problem.seq_k);
    t.rows.push_back({n, r.stage + " " + r.variant, std::to_string(static_cast<long long>(loaded)),
                      std::to_string(static_cast<long long>(masked)), std::to_string(c.dense), ratio,
                      measured ? (loaded == static_cast<double>(c.loaded) && masked == static_cast<double>(c.masked)
                                      ? "device (= formula)"
                                      : "device (!= formula)")
                               : "formula"});
  }
  if (t.rows.empty()) return;
  os << "\n== K/V tiles (Br = Bc = 64): skipped tiles are never loaded\n";
  t.print(os);
}

}  // namespace

int main(int argc, char** argv) {
  fa::StageDefinition def;
  def.id = "05";
  def.cli.program = "step05_cuda_causal";
  def.cli.summary = "causal attention that skips the K/V tiles above the diagonal and masks only the diagonal (GPU)";
  def.cli.defaults.batch = 1;
  def.cli.defaults.heads = 16;
  def.cli.defaults.dim = 64;
  def.cli.defaults.causal = true;
  def.cli.default_sweep = {512, 1024, 2048, 4096};
  def.cli.dims = {32, 64, 128};
  def.cli.variants = {"skip", "skip-in-order"};
  def.cli.extra_flags = {"--count-tiles"};
  def.cli.notes =
      "causal is on by default here (the stage is about it); the kernel without the mask is stage 04's.\n"
      "variants: skip (the heaviest Q tiles first), skip-in-order (natural order), beside stage 04.\n"
      "--count-tiles: count the K/V tiles loaded and masked on the device (a 16-byte counter).\n"
      "verification: every row against stage 04 with the mask applied to every tile (GPU);\n"
      "--no-verify skips it.";
  def.variants = {
      fa::gpu_variant("05", "skip", /*ours=*/true, with_order(true)),
      fa::gpu_variant("05", "skip-in-order", /*ours=*/true, with_order(false)),
      // The previous stage: every tile loaded, the causal mask applied to each.
      fa::gpu_variant("04", "flash", /*ours=*/false, fa::step04::attention_forward),
  };
  // Stage 04 is fast and needs no N x N memory: it verifies every row at every size.
  def.reference = {"04 flash (mask on every tile)", fa::gpu_forward(fa::step04::attention_forward), fa::kFloat32Tol};
  def.max_full_reference_flops = 1e30;
  def.row_reference = fa::Reference{"float64 loop (sampled rows)", fa::reference_forward_f64, fa::kFloat32Tol};
  def.extra_report = print_tiles;
  fa::use_gpu_defaults(def);
  return fa::run_stage(argc, argv, def);
}
