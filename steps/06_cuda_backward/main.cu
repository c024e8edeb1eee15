// main.cu — stage 06, the executable: the backward pass by recomputation against the materialized
// backward, on the GPU.
//
// What changed from stage 05: the executable runs forward + backward per case and reports the
// backward (pass "bwd", FLOPs = 2.5x the forward's) through the harness every stage shares
// (fa/stage.hpp, Pass::backward). Its own flags are bound here: --deterministic to
// step06::BackwardOptions (the variant is then named flash-deterministic in the results), and
// --paper-shapes to the harness's shape_case (fa::use_paper_shapes).
//
//   build/steps/06_cuda_backward/step06_cuda_backward                        # short sweep, verified
//   build/steps/06_cuda_backward/step06_cuda_backward --paper-shapes --dim 64 --sweep 1k,2k,4k,8k --causal
//   build/steps/06_cuda_backward/step06_cuda_backward --deterministic         # bitwise-reproducible dQ
#include <iostream>
#include <string>

#include "06_cuda_backward/flash_backward.cuh"
#include "fa/cuda/stage_arch.cuh"

int main(int argc, char** argv) {
  using namespace fa;
  CliSpec spec;
  spec.program = "step06_cuda_backward";
  spec.summary = "the backward pass by recomputation: delta = rowsum(dO∘O), P = exp(S − LSE) tile by tile";
  spec.defaults.batch = 1;
  spec.defaults.heads = 8;
  spec.defaults.dim = 64;
  spec.default_sweep = {256, 512, 1024, 2048};
  spec.supports.dims = {32, 64, 128};
  spec.variants = {"flash", "flash-deterministic", "materialized"};
  spec.notes =
      "--deterministic: dQ by a separate pass over query tiles, not float atomics (~1.4x the arithmetic).\n"
      "--paper-shapes: the FlashAttention papers' shapes (B·N = 16384 tokens, H·D = 2048), as in\n"
      "                docs/plots/anchors.json.\n"
      "backward files: --load also reads do.npy (the upstream gradient, shape of q.npy; without it\n"
      "                dO is drawn from --seed); --save also writes dq.npy dk.npy dv.npy and do.npy";
  StageCli cli(spec);
  step06::BackwardOptions options;
  bool paper_shapes = false;
  cli.app().add_flag("--deterministic", options.deterministic, "bitwise-reproducible dQ (variant flash-deterministic)")
      ->group("stage 06");
  cli.app().add_flag("--paper-shapes", paper_shapes, "B = 16384 / N and H = 2048 / D at each N")->group("stage 06");
  if (const auto exit_code = cli.parse(argc, argv)) return *exit_code;
  RunOptions& opt = cli.options();
  if (const auto exit_code = refuse_on_this_device(spec.program, step06::device_refusal(opt.problem))) return *exit_code;
  // One flash variant, named by its dQ mode; --variant flash-deterministic asks for that mode too.
  if (opt.variant == "flash-deterministic") options.deterministic = true;
  const std::string flash = options.deterministic ? "flash-deterministic" : "flash";
  if (opt.variant == "flash") opt.variant = flash;

  StageDefinition def;
  def.id = "06";
  def.pass = Pass::backward;
  const DeviceBackward backward = [options](const Problem& p, const AttentionInputs& in, ConstTensorView o,
                                            ConstTensorView lse, ConstTensorView d_o, const AttentionGradients& g,
                                            DeviceContext& ctx) {
    step06::attention_backward(p, in, o, lse, d_o, g, ctx, options);
  };
  def.variants = {gpu_backward_variant("06", flash, true, step06::attention_forward, backward),
                  // The comparison is verified too (it is this stage's own code, not a previous stage's).
                  gpu_backward_variant("06", "materialized", true, step06::attention_forward,
                                       step06::attention_backward_materialized)};
  def.verify.max_full_flops = 4e9;  // the float64 backward on every row up to here, 24 sampled rows beyond
  def.verify.sampled_rows = 24;
  if (paper_shapes) {
    if (const std::string why = use_paper_shapes(opt, def); !why.empty()) {
      std::cerr << spec.program << ": error: " << why << "\n";
      return kExitUsage;
    }
  }
  use_gpu_defaults(def, kStageMinComputeCapability);
  def.skip_reason = step06::skip_reason;  // also a GPU too small for the kernel at every D (Turing)
  return run_stage(cli, def);
}
