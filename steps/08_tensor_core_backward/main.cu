// step08_tensor_core_backward — runs stage 08 (the backward on tensor cores, fp16/bf16, after
// stage 07's forward) beside stage 06 (float32 on CUDA cores, on the same inputs converted to
// float32), verifies dQ, dK, dV against the float64 backward (all or sampled rows, with the
// tolerance that 16-bit rounding allows: fa/backward.hpp) and charts memory and time. With
// --ladder it also runs the rungs v1 .. v7 below the stage's kernel (ladder/ladder.cuh), each
// verified like it.
//
// What changed from stage 07's main: the pass is the backward (FLOPs = 2.5x the forward's), and
// the comparison is stage 06.
//
//   build/steps/08_tensor_core_backward/step08_tensor_core_backward                the default sweep, bf16
//   build/steps/08_tensor_core_backward/step08_tensor_core_backward --paper-shapes --dim 128 --sweep 4k --causal
//   build/steps/08_tensor_core_backward/step08_tensor_core_backward --ladder --paper-shapes --dim 128 --sweep 4k
#include <iostream>
#include <string>

#include "08_tensor_core_backward/ladder/ladder.cuh"
#include "08_tensor_core_backward/stage06_float32.cuh"
#include "08_tensor_core_backward/stage_cli.cuh"
#include "08_tensor_core_backward/tensor_core_backward.cuh"
#include "fa/cuda/stage_arch.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/stage.hpp"

int main(int argc, char** argv) {
  const fa::CliSpec spec = fa::step08::stage_cli_spec();
  fa::StageCli cli(spec);
  bool paper_shapes = false, ladder = false;
  fa::step08::BackwardOptions options;
  cli.app().add_flag("--ladder", ladder, "also run the rungs below the stage's kernel (v1_mma .. v7_named_barrier)")
      ->group("stage 08");
  cli.app().add_flag("--paper-shapes", paper_shapes, "B = 16384 / N and H = 2048 / D at each N")->group("stage 08");
  cli.app().add_flag("--deterministic", options.deterministic, "bitwise-reproducible dQ (variant flash-deterministic)")
      ->group("stage 08");
  if (const auto exit_code = cli.parse(argc, argv)) return *exit_code;
  fa::RunOptions& opt = cli.options();
  // One flash variant, named by its dQ mode; --variant flash-deterministic asks for that mode too.
  if (opt.variant == "flash-deterministic") options.deterministic = true;
  const std::string flash = options.deterministic ? "flash-deterministic" : "flash";
  if (opt.variant == "flash") opt.variant = flash;
  if (const auto exit_code = fa::refuse_on_this_device(spec.program, fa::step08::device_refusal(opt.problem)))
    return *exit_code;
  if (const std::string why = fa::step08::ladder::rung_refusal(opt.variant, opt.problem.dim); !why.empty()) {
    std::cerr << spec.program << ": error: " << why << "\n";
    return fa::kExitUsage;
  }

  fa::StageDefinition def;
  def.id = "08";
  def.pass = fa::Pass::backward;
  const fa::DeviceBackward backward = [options](const fa::Problem& p, const fa::AttentionInputs& in,
                                                fa::ConstTensorView o, fa::ConstTensorView lse, fa::ConstTensorView d_o,
                                                const fa::AttentionGradients& g, fa::DeviceContext& ctx) {
    fa::step08::attention_backward(p, in, o, lse, d_o, g, ctx, options);
  };
  // The rungs below the stage's kernel (--ladder, or --variant naming one), then the stage's.
  const bool with_rungs = ladder || (!opt.variant.empty() && opt.variant != flash && opt.variant != "flash-float32");
  if (with_rungs && !options.deterministic)
    for (const auto& rung : fa::step08::ladder::kLadder)
      if (std::string(rung.name) != "flash")
        def.variants.push_back(fa::gpu_backward_variant("08", rung.name, /*ours=*/true, fa::step08::attention_forward,
                                                        rung.backward));
  def.variants.push_back(fa::gpu_backward_variant("08", flash, /*ours=*/true, fa::step08::attention_forward, backward));
  // The previous stage beside it (not at --ladder: the rungs are the comparison there).
  if (fa::step08::stage06_runs(opt.problem) && !ladder) def.variants.push_back(fa::step08::stage06_in_float32());
  def.verify.max_full_flops = 4e9;  // the float64 backward on every row up to here, 24 sampled rows beyond
  def.verify.sampled_rows = 24;
  if (paper_shapes) {
    if (const std::string why = fa::use_paper_shapes(opt, def); !why.empty()) {
      std::cerr << spec.program << ": error: " << why << "\n";
      return fa::kExitUsage;
    }
  }
  fa::use_gpu_defaults(def, fa::kStageMinComputeCapability);
  return fa::run_stage(cli, def);
}
