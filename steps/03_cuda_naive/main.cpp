// step03_cuda_naive — runs stage 03's two variants (three hand-written kernels; cuBLAS GEMMs around
// the same softmax) over a short sweep beside stage 02 on the CPU, verifies them against stage 02
// (all rows while small, sampled rows beyond), charts memory and time, and prints the time split
// among the three kernels (report.cpp). Everything else lives in fa::run_stage (common/src/stage.cpp).
//
//   build/steps/03_cuda_naive/step03_cuda_naive                          the default sweep
//   build/steps/03_cuda_naive/step03_cuda_naive --batch 4 --heads 32 --seq 4096 --variant cublas
//   build/steps/03_cuda_naive/step03_cuda_naive --find-oom --batch 1 --heads 32 --dim 64 --sweep 1024 --reps 3 --warmup 1
//
// --find-oom: the largest N that fits in device memory (fa/cuda/find_oom.cuh), then the usual run
// over the doublings that fit, that N and the first N that does not: memory against N up to the wall.
#include <vector>

#include "02_cpu_online_softmax/online_softmax.hpp"
#include "fa/cli.hpp"
#include "fa/cuda/find_oom.cuh"
#include "fa/cuda/stage_arch.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/stage.hpp"
#include "naive_attention.cuh"
#include "report.hpp"

int main(int argc, char** argv) {
  fa::CliSpec spec;
  spec.program = "step03_cuda_naive";
  spec.summary = "three CUDA kernels (QK^T, row softmax, PV), S and P in device memory; and cuBLAS GEMMs";
  spec.defaults.batch = 1;
  spec.defaults.heads = 8;
  spec.defaults.dim = 64;
  spec.default_sweep = {256, 512, 1024, 2048, 4096};
  // Any head dim: the tiled kernels guard the D axis like the others (tests: 8, 16, 32, 64, 100, 128).
  spec.variants = {"naive", "cublas"};
  spec.notes =
      "variants: naive (three hand-written kernels), cublas (cublasSgemmStridedBatched, FP32 math, no\n"
      "TF32, around the same softmax kernel). Stage 02 (CPU, one thread) runs beside them up to N = 1024.\n"
      "memory: S and P, B*H*Nq*Nk floats each, measured on the meter (cuBLAS: +32 MiB workspace).\n"
      "verification: float64 on all rows while small, sampled rows beyond; and stage 02 on every row\n"
      "up to 1.1e9 FLOPs.";
  fa::StageCli cli(spec);
  bool find = false;
  cli.app().add_flag("--find-oom", find,
                     "for the given B, H, D: the largest N that fits (doubling from the first sweep size, then "
                     "bisection), then the usual run over those sizes, with oom rows past the wall");
  if (const auto exit_code = cli.parse(argc, argv)) return *exit_code;

  const std::vector<std::pair<const char*, fa::DeviceForward>> ours = {
      {"naive", fa::step03::attention_forward_naive}, {"cublas", fa::step03::attention_forward_cublas}};
  fa::StageDefinition def;
  def.id = "03";
  for (const auto& [name, forward] : ours) def.variants.push_back(fa::gpu_variant("03", name, /*ours=*/true, forward));
  def.variants.push_back(fa::step03::stage02_comparison());
  def.verify.previous = fa::PreviousStage{"02 online", fa::host_forward(fa::step02::attention_forward), 1.1e9};
  def.extra_report = fa::step03::print_kernel_split;
  fa::use_gpu_defaults(def, fa::kStageMinComputeCapability);

  // --find-oom: search first (with the variants --variant selects), then hand the sizes to the harness.
  if (find && def.skip_reason().empty()) {
    std::vector<fa::DeviceForward> probed;
    for (const auto& [name, forward] : ours)
      if (cli.options().variant.empty() || cli.options().variant == name) probed.push_back(forward);
    if (const auto exit_code = fa::apply_find_oom(cli, probed)) return *exit_code;
  }
  return fa::run_stage(cli, def);
}
