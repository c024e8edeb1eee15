// step07_tensor_cores — runs stage 07 (fp16/bf16 on tensor cores) beside stage 05 (float32 on CUDA
// cores, on the same inputs converted to float32), verifies it against float64 (all or sampled
// rows, with the tolerance that 16-bit rounding allows: docs/tolerance.md) and stage 05 (every
// row), and charts memory and time. With --ladder it also runs the rungs v1 .. v5 below the
// stage's kernel (ladder/ladder.cuh), each verified like it.
//
//   build/steps/07_tensor_cores/step07_tensor_cores                                the default sweep, bf16
//   build/steps/07_tensor_cores/step07_tensor_cores --dtype float16 --causal --seq-q 300 --seq-k 1000
//   build/steps/07_tensor_cores/step07_tensor_cores --ladder --paper-shapes --dim 128 --sweep 1k,4k,16k
#include <iostream>
#include <string>

#include "07_tensor_cores/ladder/ladder.cuh"
#include "07_tensor_cores/stage05_float32.cuh"
#include "07_tensor_cores/stage_cli.cuh"
#include "07_tensor_cores/tensor_cores.cuh"
#include "fa/cuda/stage_arch.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/stage.hpp"

int main(int argc, char** argv) {
  const fa::CliSpec spec = fa::step07::stage_cli_spec();
  fa::StageCli cli(spec);
  bool ladder = false, paper_shapes = false;
  cli.app().add_flag("--ladder", ladder, "also run the rungs below the stage's kernel (v1_mma .. v5_addresses)");
  cli.app().add_flag("--paper-shapes", paper_shapes, "B = 16384 / N and H = 2048 / D at each N")->group("stage 07");
  if (const auto exit_code = cli.parse(argc, argv)) return *exit_code;
  fa::RunOptions& opt = cli.options();
  if (const auto exit_code = fa::refuse_on_this_device(spec.program, fa::step07::device_refusal(opt.problem)))
    return *exit_code;
  if (const std::string why = fa::step07::ladder::rung_refusal(opt.variant, opt.problem.dim); !why.empty()) {
    std::cerr << spec.program << ": error: " << why << "\n";
    return fa::kExitUsage;
  }

  fa::StageDefinition def;
  def.id = "07";
  const bool with_rungs = ladder || !opt.variant.empty();
  for (const auto& rung : fa::step07::ladder::kLadder)
    if (with_rungs || std::string(rung.name) == "flash")
      def.variants.push_back(fa::gpu_variant("07", rung.name, /*ours=*/true, rung.forward));
  if (opt.problem.causal || opt.variant == "flash-in-order")
    def.variants.push_back(fa::gpu_variant("07", "flash-in-order", /*ours=*/true, fa::step07::attention_forward_in_order));
  if (fa::step07::stage05_runs(opt.problem)) {
    // The previous stage beside it (not at --ladder: the rungs are the comparison there). With
    // --load the files' D decides later: where stage 05 refuses it, the float64 check stands alone.
    if (!ladder) def.variants.push_back(fa::step07::stage05_in_float32());
    def.verify.previous = fa::PreviousStage{"05 (float32)", fa::step07::stage05_reference()};
  }
  if (paper_shapes) {
    if (const std::string why = fa::use_paper_shapes(opt, def); !why.empty()) {
      std::cerr << spec.program << ": error: " << why << "\n";
      return fa::kExitUsage;
    }
  }
  fa::use_gpu_defaults(def, fa::kStageMinComputeCapability);
  return fa::run_stage(cli, def);
}
