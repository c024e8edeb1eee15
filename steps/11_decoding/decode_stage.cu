// decode_stage.cu — stage 11's options and variants for the harness (see decode_stage.cuh).
#include "11_decoding/decode_stage.cuh"

#include <cstdlib>
#include <ostream>
#include <string>
#include <vector>

#include "11_decoding/inference.cuh"
#include "11_decoding/lab/read_cache.cuh"
#include "fa/cuda/device.cuh"
#include "fa/cuda/stage_arch.cuh"
#include "fa/cuda/stage_gpu.cuh"

namespace fa::step11 {

void DecodeCommandLine::add_to(CLI::App& app) {
  app.add_option("--splits", splits,
                 "key chunks of the split_kv variants, 1..128 (the cluster merge: at most 16, a cluster this GPU holds;\n"
                 "default: chosen for this GPU)")
      ->check(CLI::Range(1, 128))
      ->group("stage 11");
  app.add_option("--page-size", page_size, "keys per page of split_kv_paged's cache, a multiple of 64 (default 256)")
      ->check([](const std::string& v) {
        const int n = std::atoi(v.c_str());
        return n > 0 && n % kPageMultiple == 0 ? std::string() : std::string("must be a positive multiple of 64");
      })
      ->group("stage 11");
}

StageDefinition decode_stage(const RunOptions& run, const DecodeCommandLine& options) {
  const int splits = options.splits, page_size = options.page_size;
  StageDefinition def;
  def.id = "11";
  // The splits (chosen, or --splits), merged four ways: the rungs of the merge (ladder/, then the
  // stage's kernel).
  auto split_kv = [splits](Merge merge) -> DeviceForward {
    return [splits, merge](const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx) {
      decode_forward(p, in, out, ctx, DecodeOptions{.splits = splits, .merge = merge});
    };
  };
  def.variants.push_back(gpu_variant("11", "split_kv", /*ours=*/true, split_kv(Merge::warp_per_row)));
  def.variants.push_back(gpu_variant("11", "split_kv_block_merge", /*ours=*/true, split_kv(Merge::block_per_row)));
  def.variants.push_back(gpu_variant("11", "split_kv_fused_merge", /*ours=*/true, split_kv(Merge::last_block)));
  def.variants.push_back(gpu_variant("11", "split_kv_cluster_merge", /*ours=*/true, split_kv(Merge::cluster)));
  def.variants.push_back(gpu_variant("11", "one_split", /*ours=*/true, attention_forward_one_split));
  def.variants.push_back(gpu_variant(
      "11", "split_kv_paged", /*ours=*/true,
      [splits, page_size](const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx) {
        decode_forward_paged(p, in, out, ctx, DecodeOptions{.splits = splits, .merge = Merge::block_per_row}, page_size);
      }));
  // Not attention: the cache read once and nothing else, the floor measured on this GPU.
  def.variants.push_back(gpu_variant("11", "read_cache", /*ours=*/false, read_cache_only));
  // The previous stage beside it, same dtype: the chart's comparison and the second opinion.
  def.variants.push_back(gpu_variant("07", "flash", /*ours=*/false, stage07_repeated_heads));
  def.verify.previous = PreviousStage{"07 flash", gpu_forward(stage07_repeated_heads)};
  use_gpu_defaults(def, kStageMinComputeCapability);
  // A decoding step takes microseconds: more repetitions for a steady median.
  def.default_reps = 50;
  // After the table: the splits each length ran with, and the clusters this GPU holds.
  def.extra_report = [&run, splits](std::ostream& os, const std::vector<ResultRow>&) {
    const bool clusters = current_compute_capability() >= 90;
    os << "\n";
    for (const Merge merge : {Merge::warp_per_row, Merge::cluster}) {
      if (merge == Merge::cluster && !clusters) continue;
      os << (merge == Merge::cluster ? "splits (split_kv_cluster_merge):" : "splits (split_kv):");
      for (const auto& [nq, nk] : run.sizes) {
        Problem p = run.problem;
        p.seq_q = nq;
        p.seq_k = nk;
        const DecodePlan plan = plan_decode(p, splits, merge);
        os << "  Nk=" << nk << ": " << plan.splits << " × " << plan.blocks;
        if (merge == Merge::cluster) os << " clusters";
        else os << " blocks on " << plan.slots << " at once";
      }
      os << "\n";
    }
    if (!clusters) return;
    os << "clusters of the decode kernel this GPU holds at once, by blocks per cluster:";
    for (int s = 2; s <= kMaxClusterSplits; ++s) os << " " << s << ":" << cluster_capacity(run.problem, s);
    os << "\n";
  };
  return def;
}

}  // namespace fa::step11
