// step05_cuda_causal — runs stage 05 (causal with tile skipping) beside stage 04 (the mask applied
// to every tile), verifies it against float64 (all or sampled rows) and stage 04 (every row, on the
// GPU), and charts memory and time. Two variants of this stage: `skip` starts the heaviest Q
// tiles first, `skip-in-order` keeps the natural order, so that the effect of the order is measured.
//
//   build/steps/05_cuda_causal/step05_cuda_causal                          the default sweep (causal)
//   build/steps/05_cuda_causal/step05_cuda_causal --batch 4 --heads 32 --seq 4096
//   build/steps/05_cuda_causal/step05_cuda_causal --seq-q 300 --seq-k 1000   Nq < Nk: a KV cache
#include "04_cuda_flash_forward/flash_forward.cuh"
#include "05_cuda_causal/flash_causal.cuh"
#include "05_cuda_causal/tile_report.hpp"
#include "fa/cli.hpp"
#include "fa/cuda/stage_arch.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/reference.hpp"
#include "fa/stage.hpp"

namespace {

fa::DeviceForward with_order(bool heavy_first) {
  return [heavy_first](const fa::Problem& p, const fa::AttentionInputs& in, const fa::AttentionOutputs& out,
                       fa::DeviceContext& ctx) { fa::step05::attention_forward_ordered(p, in, out, ctx, heavy_first); };
}

}  // namespace

int main(int argc, char** argv) {
  fa::CliSpec spec;
  spec.program = "step05_cuda_causal";
  spec.summary = "causal attention that skips the K/V tiles above the diagonal and masks only the diagonal (GPU)";
  spec.defaults.batch = 1;
  spec.defaults.heads = 16;
  spec.defaults.dim = 64;
  spec.defaults.causal = true;
  spec.default_sweep = {512, 1024, 2048, 4096};
  spec.supports = fa::step04::kSupports;
  spec.variants = {"skip", "skip-in-order"};
  spec.notes =
      "causal is on by default here (the stage is about it); the kernel without the mask is stage 04's.\n"
      "variants: skip (the heaviest Q tiles first), skip-in-order (natural order), beside stage 04.\n"
      "verification: float64 on all rows while small, sampled rows beyond; and every row against\n"
      "stage 04 with the mask applied to every tile (GPU). --no-verify skips both.";
  fa::StageCli cli(spec);
  if (const auto exit_code = cli.parse(argc, argv)) return *exit_code;
  if (const auto exit_code = fa::refuse_on_this_device(spec.program, fa::step04::device_refusal(cli.options().problem, "05"))) return *exit_code;

  fa::StageDefinition def;
  def.id = "05";
  def.variants = {
      fa::gpu_variant("05", "skip", /*ours=*/true, with_order(true)),
      fa::gpu_variant("05", "skip-in-order", /*ours=*/true, with_order(false)),
      // The previous stage: every tile loaded, the causal mask applied to each.
      fa::gpu_variant("04", "flash", /*ours=*/false, fa::step04::attention_forward),
  };
  // Stage 04 is fast and needs no N x N memory: it checks every row at every size.
  def.verify.previous = fa::PreviousStage{"04 flash (mask on every tile)", fa::gpu_forward(fa::step04::attention_forward)};
  def.extra_report = fa::step05::print_tile_counts;  // what the skipping saved, size by size
  fa::use_gpu_defaults(def, fa::kStageMinComputeCapability);
  return fa::run_stage(cli, def);
}
