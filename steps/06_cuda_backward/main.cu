// main.cu — stage 06, the executable: the backward pass by recomputation against the materialized
// backward, on the GPU.
//
// What changed from stage 05: the executable runs forward + backward per case and reports the
// backward (pass "bwd", FLOPs = 2.5x the forward's) through the backward harness
// (fa/backward.hpp), which reuses the common CLI, results file, table and charts.
//
//   cmake --build build --target step06_cuda_backward
//   build/steps/06_cuda_backward/step06_cuda_backward                        # short sweep, verified
//   build/steps/06_cuda_backward/step06_cuda_backward --paper-shapes --dim 64 --sweep 1k,2k,4k,8k --causal
//   build/steps/06_cuda_backward/step06_cuda_backward --deterministic         # bitwise-reproducible dQ
//
// --load DIR reads q.npy k.npy v.npy and do.npy; --save DIR writes o, lse, dq, dk, dv (.npy).
#include "06_cuda_backward/flash_backward.cuh"
#include "fa/cuda/backward_gpu.cuh"

int main(int argc, char** argv) {
  using namespace fa;
  BackwardStageDefinition def;
  def.id = "06";
  def.cli.program = "step06_cuda_backward";
  def.cli.summary = "the backward pass by recomputation: delta = rowsum(dO∘O), P = exp(S − LSE) tile by tile";
  def.cli.defaults.batch = 1;
  def.cli.defaults.heads = 8;
  def.cli.defaults.dim = 64;
  def.cli.default_sweep = {256, 512, 1024, 2048};
  def.cli.dims = {32, 64, 128};
  def.cli.variants = {"flash", "materialized"};
  def.cli.extra_flags = {"--deterministic", "--paper-shapes"};
  def.cli.notes =
      "stage 06 flags:\n"
      "  --deterministic      dQ by a separate pass over query tiles instead of float atomics:\n"
      "                       bitwise-identical dQ on every run, about 1.4x the arithmetic\n"
      "  --paper-shapes       batch = 16384 / N and heads = 2048 / D at each N (the FlashAttention\n"
      "                       papers' shapes, those of docs/plots/anchors.json)\n"
      "backward files: --load also reads do.npy (the upstream gradient, shape of q.npy; without it\n"
      "                dO is drawn from --seed); --save also writes dq.npy dk.npy dv.npy and do.npy";
  def.variants.push_back(gpu_backward_variant("06", "flash", true, step06::attention_forward,
                                              [](const Problem& p, const AttentionInputs& in, const float* o,
                                                 const float* lse, const float* d_o, const AttentionGradients& g,
                                                 DeviceContext& ctx) {
                                                step06::attention_backward(p, in, o, lse, d_o, g, ctx);
                                              }));
  // The comparison is verified too (it is this stage's own code, not a previous stage's).
  def.variants.push_back(gpu_backward_variant("06", "materialized", true, step06::attention_forward,
                                              step06::attention_backward_materialized));
  use_gpu_defaults(def);
  return run_backward_stage(argc, argv, def);
}
