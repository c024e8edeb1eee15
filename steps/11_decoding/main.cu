// step11_decoding — runs stage 11's split-KV decoding (grouped heads, a few query rows against a
// long cache) beside one split (the grid without the idea) and stage 07 (its K/V heads repeated to
// Hq), verifies it against float64 (all or sampled rows, the 16-bit rule of docs/tolerance.md) and
// against stage 07 on every row, and charts memory and time. The default: decoding one token
// (Nq = 1) with 32 query heads on 8 K/V heads, D = 128, bf16, caches of 1k to 32k keys.
//
//   build/steps/11_decoding/step11_decoding                                 the default sweep
//   build/steps/11_decoding/step11_decoding --seq-q 4 --seq-k 100k --causal --batch 2
//   build/steps/11_decoding/step11_decoding --variant split_kv --splits 8 --seq-k 32k
// Prefill with grouped heads and packed batches: stage 12 (step12_variable_lengths).
#include <cstdlib>
#include <string>

#include "11_decoding/inference.cuh"
#include "fa/cuda/device.cuh"
#include "fa/cuda/stage_arch.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/stage.hpp"

int main(int argc, char** argv) {
  fa::CliSpec spec;
  spec.program = "step11_decoding";
  spec.summary = "split-KV decoding with grouped-query heads: a few queries against a long K/V cache (GPU)";
  spec.defaults.batch = 1;
  spec.defaults.heads = 32;
  spec.defaults.heads_kv = 8;
  spec.defaults.dim = 128;
  spec.defaults.dtype = fa::DType::bfloat16;
  spec.default_sweep = {1024, 8192, 32768};
  spec.default_seq_q = 1;  // decoding: a sweep (or --seq-k alone) is over the cache; one new query
  spec.supports = fa::step11::kSupports;
  spec.variants = {"split_kv", "split_kv_block_merge", "split_kv_fused_merge", "split_kv_cluster_merge", "one_split",
                   "split_kv_paged"};
  spec.notes =
      "kernel: one block per (batch, K/V head, 16 query rows, key chunk): the G = Hq/Hkv query heads of a\n"
      "group are rows of one tile (K/V read once per group); 4 warps split the chunk's key tiles (32 keys at\n"
      "D = 128, 64 at D = 64), each with two cp.async stages, merged in shared memory (the cluster merge\n"
      "sends each warp's part instead); mma.sync for both products. The chunks are merged by the LSE rule\n"
      "(split_merge.hpp): by a second kernel, or in the split kernel.\n"
      "split_kv: key chunks chosen from the shape and the SM count (--splits N to force N);\n"
      "split_kv_block_merge: the same, its chunks merged by a block per row instead of a warp (about 7 µs faster, H100);\n"
      "split_kv_fused_merge: no merge kernel: the last block of each row tile to finish merges its rows;\n"
      "split_kv_cluster_merge: no merge kernel, no partials in global memory: a row tile's splits (chosen: at most 8)\n"
      "are one thread-block cluster; each warp sends its part (st.async) into the shared memory of the blocks that\n"
      "merge it, an mbarrier counting the bytes (compute capability 9.0; the fastest on an H100, and there\n"
      "decode_forward's default, Merge::fastest);\n"
      "one_split: one chunk, no merge kernel.\n"
      "split_kv_paged: split_kv_block_merge on a paged copy of the cache (pages of --page-size keys in a\n"
      "scattered order, read through a block table; the copy timed apart in split_ms).\n"
      "read_cache (runs beside every decoding case, like the comparison): not attention, a plain read of the cache:\n"
      "K and V read once (one wave, as many blocks as fit), nothing computed, O = 0; not verified.\n"
      "memory beyond Q, K, V, O, LSE: the partial results, splits·B·Hq·Nq·(D + 1) floats (measured); the\n"
      "fused merge's counters (one int per row tile); the paged copy's pools and block table. The cluster merge: none.\n"
      "compared with: stage 07 on K/V repeated to Hq heads (the repeat is timed with it).\n"
      "steps back to back, and overlapping the step before (programmatic dependent launch): step11_stream\n"
      "(steps/11_decoding/stream.cu), built beside this executable.\n"
      "verification: float64 on all rows up to 2e9 FLOPs, sampled rows beyond (docs/tolerance.md);\n"
      "stage 07 on the same inputs on every row.";
  fa::StageCli cli(spec);
  int splits = 0, page_size = 256;
  cli.app()
      .add_option("--splits", splits,
                  "key chunks of the split_kv variants, 1..128 (the cluster merge: at most 16, a cluster this GPU holds;\n"
                  "default: chosen for this GPU)")
      ->check(CLI::Range(1, 128))
      ->group("stage 11");
  cli.app()
      .add_option("--page-size", page_size, "keys per page of split_kv_paged's cache, a multiple of 64 (default 256)")
      ->check([](const std::string& v) {
        const int n = std::atoi(v.c_str());
        return n > 0 && n % fa::step11::kPageMultiple == 0 ? std::string() : std::string("must be a positive multiple of 64");
      })
      ->group("stage 11");
  if (const auto exit_code = cli.parse(argc, argv)) return *exit_code;
  fa::RunOptions& opt = cli.options();
  if (auto refused = fa::refuse_on_this_device(spec.program, fa::step11::device_refusal(opt.problem))) return *refused;

  fa::StageDefinition def;
  def.id = "11";
  // The splits (chosen, or --splits), merged four ways: the rungs of the merge.
  auto split_kv = [splits](fa::step11::Merge merge) -> fa::DeviceForward {
    return [splits, merge](const fa::Problem& p, const fa::AttentionInputs& in, const fa::AttentionOutputs& out,
                           fa::DeviceContext& ctx) {
      fa::step11::decode_forward(p, in, out, ctx, fa::step11::DecodeOptions{.splits = splits, .merge = merge});
    };
  };
  def.variants.push_back(fa::gpu_variant("11", "split_kv", /*ours=*/true, split_kv(fa::step11::Merge::warp_per_row)));
  def.variants.push_back(
      fa::gpu_variant("11", "split_kv_block_merge", /*ours=*/true, split_kv(fa::step11::Merge::block_per_row)));
  def.variants.push_back(
      fa::gpu_variant("11", "split_kv_fused_merge", /*ours=*/true, split_kv(fa::step11::Merge::last_block)));
  def.variants.push_back(
      fa::gpu_variant("11", "split_kv_cluster_merge", /*ours=*/true, split_kv(fa::step11::Merge::cluster)));
  def.variants.push_back(fa::gpu_variant("11", "one_split", /*ours=*/true, fa::step11::attention_forward_one_split));
  def.variants.push_back(fa::gpu_variant(
      "11", "split_kv_paged", /*ours=*/true,
      [splits, page_size](const fa::Problem& p, const fa::AttentionInputs& in, const fa::AttentionOutputs& out,
                          fa::DeviceContext& ctx) {
        fa::step11::decode_forward_paged(
            p, in, out, ctx, fa::step11::DecodeOptions{.splits = splits, .merge = fa::step11::Merge::block_per_row},
            page_size);
      }));
  // Not attention: the cache read once and nothing else, the floor measured on this GPU.
  def.variants.push_back(fa::gpu_variant("11", "read_cache", /*ours=*/false, fa::step11::read_cache_only));
  // The previous stage beside it, same dtype: the chart's comparison and the second opinion.
  def.variants.push_back(fa::gpu_variant("07", "flash", /*ours=*/false, fa::step11::stage07_repeated_heads));
  def.verify.previous = fa::PreviousStage{"07 flash", fa::gpu_forward(fa::step11::stage07_repeated_heads)};
  fa::use_gpu_defaults(def, fa::kStageMinComputeCapability);
  // A decoding step takes microseconds: more repetitions for a steady median.
  def.default_reps = 50;
  def.extra_report = [&opt, splits](std::ostream& os, const std::vector<fa::ResultRow>&) {
    using fa::step11::Merge;
    const bool clusters = fa::current_compute_capability() >= 90;
    os << "\n";
    for (const Merge merge : {Merge::warp_per_row, Merge::cluster}) {
      if (merge == Merge::cluster && !clusters) continue;
      os << (merge == Merge::cluster ? "splits (split_kv_cluster_merge):" : "splits (split_kv):");
      for (const auto& [nq, nk] : opt.sizes) {
        fa::Problem p = opt.problem;
        p.seq_q = nq;
        p.seq_k = nk;
        const fa::step11::DecodePlan plan = fa::step11::plan_decode(p, splits, merge);
        os << "  Nk=" << nk << ": " << plan.splits << " × " << plan.blocks;
        if (merge == Merge::cluster) os << " clusters";
        else os << " blocks on " << plan.slots << " at once";
      }
      os << "\n";
    }
    if (!clusters) return;
    os << "clusters of the decode kernel this GPU holds at once, by blocks per cluster:";
    for (int s = 2; s <= fa::step11::kMaxClusterSplits; ++s) os << " " << s << ":" << fa::step11::cluster_capacity(opt.problem, s);
    os << "\n";
  };
  return fa::run_stage(cli, def);
}
