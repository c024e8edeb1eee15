// step04_cuda_flash_forward — runs stage 04's fused kernel over a short sweep beside stage 03 (three
// kernels, S and P in device memory; and its cuBLAS variant), verifies it against stage 03 (all rows
// while stage 03 fits in memory, sampled float64 rows beyond), and charts memory and time: stage
// 03's extra memory grows as N², stage 04's is zero. Everything else lives in fa::run_stage.
//
//   build/steps/04_cuda_flash_forward/step04_cuda_flash_forward                        the default sweep
//   build/steps/04_cuda_flash_forward/step04_cuda_flash_forward --batch 4 --heads 32 --seq 4096
//   build/steps/04_cuda_flash_forward/step04_cuda_flash_forward --batch 1 --heads 1 --seq 1M --reps 1
#include <new>

#include "04_cuda_flash_forward/flash_forward.cuh"
#include "fa/cli.hpp"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/reference.hpp"
#include "fa/stage.hpp"
#ifdef FA_HAVE_STEP03
#include "03_cuda_naive/naive_attention.cuh"
#endif

namespace {

#ifdef FA_HAVE_STEP03
// Stage 03 as the reference: when its S and P do not fit on the device, the harness is told
// "out of memory" (std::bad_alloc) and falls back to sampled rows against float64.
void stage03_reference(const fa::Problem& p, const fa::AttentionData& in, fa::AttentionResult& out) {
  try {
    fa::gpu_forward(fa::step03::attention_forward_naive)(p, in, out);
  } catch (const fa::OutOfMemory&) {
    throw std::bad_alloc();
  }
}
#endif


}  // namespace

int main(int argc, char** argv) {
  fa::StageDefinition def;
  def.id = "04";
  def.cli.program = "step04_cuda_flash_forward";
  def.cli.summary = "one fused kernel: Q tile on chip, K/V tiles streamed, online softmax; only O and LSE written (GPU)";
  def.cli.defaults.batch = 1;
  def.cli.defaults.heads = 16;
  def.cli.defaults.dim = 64;
  def.cli.default_sweep = {512, 1024, 2048, 4096};
  def.cli.dims = {32, 64, 128};
  def.cli.variants = {"flash"};
  def.cli.notes =
      "kernel: Br = Bc = 64, 128 threads, 8 x 4 scores per thread, float32 on CUDA cores;\n"
      "D = 32, 64, 128 (compiled in); causal masks every tile (stage 05 skips them).\n"
      "memory beyond Q, K, V, O, LSE: none (measured).\n"
      "verification: all rows against stage 03 while it fits (and the problem is at most 5e10\n"
      "FLOPs), else sampled rows against a float64 loop on the CPU (tolerance 2e-5, or\n"
      "2·eps·sqrt(Nk) beyond Nk = 30000: float32 sums over Nk keys).";
  def.variants = {fa::gpu_variant("04", "flash", /*ours=*/true, fa::step04::attention_forward)};
#ifdef FA_HAVE_STEP03
  // The previous stage beside it, for the charts: S and P grow as N² (up to N = 16384).
  def.variants.push_back(fa::gpu_variant("03", "naive", /*ours=*/false, fa::step03::attention_forward_naive, 16384));
  def.variants.push_back(fa::gpu_variant("03", "cublas", /*ours=*/false, fa::step03::attention_forward_cublas, 16384));
  def.reference = {"03 naive", stage03_reference, fa::kFloat32Tol};
  def.max_full_reference_flops = 5e10;
#else
  def.reference = {"float64 loop", fa::reference_forward_f64, fa::kFloat32Tol};
  def.max_full_reference_flops = 2e9;
#endif
  def.row_reference = fa::Reference{"float64 loop (sampled rows)", fa::reference_forward_f64, fa::kFloat32Tol};
  fa::use_gpu_defaults(def);
  return fa::run_stage(argc, argv, def);
}
