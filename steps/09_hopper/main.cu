// step09_hopper — runs stage 09 (fp16/bf16 on Hopper: TMA and wgmma) beside stage 07 (mma.sync, on
// the same inputs), verifies it against float64 (all or sampled rows, the 16-bit rule of
// docs/tolerance.md) and against stage 07 on every row, and charts memory and time. Needs a GPU of
// compute capability 9.0 (the build is sm_90a): elsewhere it prints why and exits 77.
//
//   build/steps/09_hopper/step09_hopper                                the default sweep, bf16
//   build/steps/09_hopper/step09_hopper --dtype float16 --causal --seq-q 300 --seq-k 1000
//   build/steps/09_hopper/step09_hopper --paper-shapes --dim 128 --sweep 1k,4k,16k
#include <iostream>
#include <string>

#include "07_tensor_cores/tensor_cores.cuh"
#include "09_hopper/hopper.cuh"
#include "fa/cuda/stage_arch.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/stage.hpp"

int main(int argc, char** argv) {
  fa::CliSpec spec;
  spec.program = "step09_hopper";
  spec.summary = "the forward on Hopper: TMA tiles, wgmma for both products (GPU, compute capability 9.0)";
  spec.defaults.batch = 1;
  spec.defaults.heads = 16;
  spec.defaults.dim = 64;
  spec.defaults.dtype = fa::DType::bfloat16;
  spec.default_sweep = {512, 1024, 2048, 4096};
  spec.supports = fa::step09::kSupports;
  spec.variants = {"tma_wgmma", "warp_specialized", "pingpong", "overlap", "persistent"};
  spec.notes =
      "kernels: two warpgroups of 64 query rows (Br = 128), K/V tiles of 128 keys by TMA, two stages\n"
      "(pingpong and overlap: see below),\n"
      "wgmma for S = Q·Kᵀ (both from shared memory) and O += P·V (P from registers); D = 64, 128.\n"
      "D = 256 (correct, not tuned): key tiles of 64 and two stages in every rung.\n"
      "tma_wgmma: every warp computes, one thread issues the copies; warp_specialized: a producer\n"
      "warpgroup (setmaxnreg 40) issues them, the two consumers (232) compute, mbarriers between;\n"
      "pingpong: the consumers take turns on the tensor cores (named barriers), three stages; at\n"
      "D = 64 three consumers (Br = 192, 160 registers each);\n"
      "overlap: and each one's softmax of tile j runs under its own P·V of tile j − 1.\n"
      "persistent: overlap's work, one block per SM taking query tiles from a counter (4 bytes of\n"
      "static device memory), the next tile's copies under this one's end; causal, the query tiles end at the\n"
      "last row and the heaviest tiles of a group of heads go first.\n"
      "grid: (query tiles, heads), a head's tiles resident together (its K/V shared in L2).\n"
      "memory beyond Q, K, V, O, LSE: none (measured).\n"
      "verification: float64 on all rows up to 2e9 FLOPs, sampled rows beyond (docs/tolerance.md);\n"
      "stage 07 on the same inputs on every row.\n"
      "--paper-shapes: B = 16384 / N and H = 2048 / D (the FlashAttention papers' sweep).";
  fa::StageCli cli(spec);
  bool paper_shapes = false;
  cli.app().add_flag("--paper-shapes", paper_shapes, "B = 16384 / N and H = 2048 / D at each N")->group("stage 09");
  if (const auto exit_code = cli.parse(argc, argv)) return *exit_code;
  fa::RunOptions& opt = cli.options();

  fa::StageDefinition def;
  def.id = "09";
  // The rungs: tma_wgmma (every warp moves and computes), warp_specialized (a producer warpgroup),
  // pingpong (the consumers take turns), overlap (softmax under the warpgroup's own P·V),
  // persistent (one block per SM, the tiles from a counter).
  def.variants.push_back(fa::gpu_variant("09", "tma_wgmma", /*ours=*/true, fa::step09::attention_forward));
  def.variants.push_back(
      fa::gpu_variant("09", "warp_specialized", /*ours=*/true, fa::step09::attention_forward_warp_specialized));
  def.variants.push_back(fa::gpu_variant("09", "pingpong", /*ours=*/true, fa::step09::attention_forward_pingpong));
  def.variants.push_back(fa::gpu_variant("09", "overlap", /*ours=*/true, fa::step09::attention_forward_overlap));
  def.variants.push_back(fa::gpu_variant("09", "persistent", /*ours=*/true, fa::step09::attention_forward_persistent));
  // The previous stage beside it, same dtype: the chart's comparison and the second opinion.
  def.variants.push_back(fa::gpu_variant("07", "flash", /*ours=*/false, fa::step07::attention_forward));
  def.verify.previous = fa::PreviousStage{"07 flash", fa::gpu_forward(fa::step07::attention_forward)};
  if (paper_shapes) {
    if (const std::string why = fa::use_paper_shapes(opt, def); !why.empty()) {
      std::cerr << spec.program << ": error: " << why << "\n";
      return fa::kExitUsage;
    }
  }
  fa::use_gpu_defaults(def, fa::kStageMinComputeCapability);
  def.skip_reason = fa::step09::hopper_skip_reason;  // 9.0 exactly, not "9.0 or newer"
  return fa::run_stage(cli, def);
}
