// step04_cuda_flash_forward — runs stage 04's fused kernel over a short sweep beside stage 03 (three
// kernels, S and P in device memory; and its cuBLAS variant), verifies it against float64 (all rows
// while small, sampled rows beyond) and stage 03 (every row, while it fits in memory), and charts
// memory and time: stage 03's extra memory grows as N², stage 04's is zero. Everything else lives
// in fa::run_stage. With --ladder it also runs the ladder's rungs v1 .. v4 below the stage's
// kernel (ladder/ladder.cuh), each verified like it: the progression, one idea per rung.
//
//   build/steps/04_cuda_flash_forward/step04_cuda_flash_forward                        the default sweep
//   build/steps/04_cuda_flash_forward/step04_cuda_flash_forward --ladder               every rung, same sweep
//   build/steps/04_cuda_flash_forward/step04_cuda_flash_forward --variant v3_swizzle   one rung
//   build/steps/04_cuda_flash_forward/step04_cuda_flash_forward --batch 4 --heads 32 --seq 4096
//   build/steps/04_cuda_flash_forward/step04_cuda_flash_forward --batch 1 --heads 1 --seq 1M --reps 1
#include <string>

#include "04_cuda_flash_forward/flash_forward.cuh"
#include "04_cuda_flash_forward/ladder/ladder.cuh"
#include "fa/cuda/stage_arch.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/stage.hpp"
#ifdef FA_HAVE_STEP03
#include "03_cuda_naive/naive_attention.cuh"
#endif

int main(int argc, char** argv) {
  fa::CliSpec spec;
  spec.program = "step04_cuda_flash_forward";
  spec.summary = "one fused kernel: Q tile on chip, K/V tiles streamed, online softmax; only O and LSE written (GPU)";
  spec.defaults.batch = 1;
  spec.defaults.heads = 16;
  spec.defaults.dim = 64;
  spec.default_sweep = {512, 1024, 2048, 4096};
  spec.supports = fa::step04::kSupports;
  for (const auto& rung : fa::step04::ladder::kLadder) spec.variants.emplace_back(rung.name);
  spec.notes =
      "kernel: Br = Bc = 64, 128 threads, 8 x 4 scores per thread, float32 on CUDA cores;\n"
      "D = 32, 64, 128 (compiled in); causal masks every tile (stage 05 skips them).\n"
      "memory beyond Q, K, V, O, LSE: none (measured).\n"
      "verification: float64 on all rows up to 2e9 FLOPs, sampled rows beyond; stage 03 on every row\n"
      "while it fits (up to 5e10 FLOPs). The allowed error is measured: docs/tolerance.md.\n"
      "the ladder (--ladder; --variant NAME runs one rung): v1_algorithm1 (FA2's Algorithm 1, one thread\n"
      "per row), v2_register_tile (8 x 4 micro-tile), v3_swizzle (no bank conflicts), v4_cp_async (K/V\n"
      "streamed behind the math), flash (exp2, scale folded into Q: the stage's kernel).";
  fa::StageCli cli(spec);
  bool ladder = false;
  cli.app().add_flag("--ladder", ladder,
                     "also run the rungs below the stage's kernel (v1_algorithm1 .. v4_cp_async), each verified");
  if (const auto exit_code = cli.parse(argc, argv)) return *exit_code;
  if (const auto exit_code = fa::refuse_on_this_device(spec.program, fa::step04::device_refusal(cli.options().problem, "04"))) return *exit_code;

  fa::StageDefinition def;
  def.id = "04";
  // The ladder bottom to top, the stage's kernel (`flash`) last; --variant keeps one of them. Without
  // --ladder or --variant, the stage's kernel alone (the default run stays short).
  const bool with_rungs = ladder || !cli.options().variant.empty();
  for (const auto& rung : fa::step04::ladder::kLadder)
    if (with_rungs || std::string(rung.name) == "flash")
      def.variants.push_back(fa::gpu_variant("04", rung.name, /*ours=*/true, rung.forward));
#ifdef FA_HAVE_STEP03
  // The previous stage beside it, for the charts: S and P grow as N² (up to N = 16384). As the
  // reference it runs every row while its S and P fit on the device.
  def.variants.push_back(fa::gpu_variant("03", "naive", /*ours=*/false, fa::step03::attention_forward_naive, 16384));
  def.variants.push_back(fa::gpu_variant("03", "cublas", /*ours=*/false, fa::step03::attention_forward_cublas, 16384));
  def.verify.previous = fa::PreviousStage{"03 naive", fa::gpu_forward(fa::step03::attention_forward_naive), 5e10};
#endif
  fa::use_gpu_defaults(def, fa::kStageMinComputeCapability);
  return fa::run_stage(cli, def);
}
