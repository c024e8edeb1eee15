// step10_hopper_backward — runs stage 10's rungs (the backward on Hopper: wgmma for all five
// products, Q and dO by TMA, after stage 09's forward) beside stage 08 (mma.sync, after stage 07's
// forward, on the same inputs), verifies dQ, dK, dV against the float64 backward (all or sampled
// rows, with the tolerance that 16-bit rounding allows: fa/backward.hpp) and charts memory and time.
// Needs a GPU of compute capability 9.0 (the build is sm_90a): elsewhere it prints why and exits 77.
//
// What changed from stage 08's main: the variants are the ladder's rungs (ladder/; rung 14,
// kStageRung, is the stage's kernel), the comparison is stage 08, and the forward is stage 09's.
//
//   build/steps/10_hopper_backward/step10_hopper_backward                 the default sweep, bf16
//   build/steps/10_hopper_backward/step10_hopper_backward --dtype float16 --causal --seq-q 300 --seq-k 1000
//   build/steps/10_hopper_backward/step10_hopper_backward --paper-shapes --dim 128 --sweep 4k,16k --causal
#include <iostream>
#include <string>

#include "08_tensor_core_backward/tensor_core_backward.cuh"
#include "10_hopper_backward/hopper_backward.cuh"
#include "fa/cuda/stage_arch.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/stage.hpp"

int main(int argc, char** argv) {
  fa::CliSpec spec;
  spec.program = "step10_hopper_backward";
  spec.summary = "the backward on Hopper: wgmma for all five products, TMA tiles (GPU, compute capability 9.0)";
  spec.defaults.batch = 1;
  spec.defaults.heads = 16;
  spec.defaults.dim = 64;
  spec.defaults.dtype = fa::DType::bfloat16;
  spec.default_sweep = {512, 1024, 2048, 4096};
  spec.supports = fa::step10::kSupports;
  spec.variants = {"wgmma", "rows_in_shared", "dq_by_tma", "own_dq", "stmatrix", "three_groups", "group_barrier",
                   "wide_query_tiles", "fast_exp", "dq_before_dk", "dv_early", "tiles_of_80", "heavy_first",
                   "split_tail", "deterministic"};
  spec.notes =
      "kernel (wgmma): one block per tile of 128 keys, two warpgroups of 64 keys; query tiles of 64\n"
      "streamed by TMA (Q and dO, two buffers); wgmma for S^T = K.Q^T and dP^T = V.dO^T (both from\n"
      "shared memory), dV += P^T.dO and dK += dS^T.Q (P^T, dS^T from registers), dQ += dS.K (dS\n"
      "through shared memory, transposed); dQ by float atomics into a float32 buffer, then converted.\n"
      "rows_in_shared: wgmma's, with each query tile's LSE*log2e and D brought into\n"
      "shared memory by bulk copies beside Q and dO, instead of read from global memory by every thread.\n"
      "dq_by_tma: rows_in_shared's, with dQ stored into shared memory and added\n"
      "into the float32 buffer by the TMA (cp.reduce.async.bulk.tensor .add) instead of by the\n"
      "threads' atomics; grouped heads (--heads-kv): dK, dV summed over each group in registers.\n"
      "own_dq: dq_by_tma's, with each warpgroup on its own: dQ over its own 64 keys into a buffer of\n"
      "its own, Q/dO stages released warp by warp, no block barrier inside the loop.\n"
      "stmatrix: dq_by_tma's, with dS stored by stmatrix (four 8x8 tiles, transposed, per\n"
      "instruction) instead of one 16-bit store per element.\n"
      "three_groups: stmatrix's with three warpgroups of 64 keys at D = 64\n"
      "(Bc = 192); at D = 128 the same kernel as stmatrix.\n"
      "group_barrier: three_groups's with each warpgroup's own barrier after dS's stores at D = 64 (its\n"
      "dQ reads only its own keys of dS); at D = 128 the block's, as before.\n"
      "wide_query_tiles: stmatrix's with query tiles of 128 and two warpgroups at D = 64 (S^T and dP^T\n"
      "64 keys x 128 queries a warpgroup, dQ split by rows); at D = 128 the same kernel as three_groups.\n"
      "fast_exp: wide_query_tiles's with one MUFU.EX2 per exponential (ex2.approx.ftz, not exp2f).\n"
      "dq_before_dk: fast_exp's with dQ's products issued before dK's (dQ stored\n"
      "while dK runs).\n"
      "dv_early: dq_before_dk's with dV's products issued as soon as P is ready (they run while dS is\n"
      "computed and stored).\n"
      "tiles_of_80: dq_before_dk's with query tiles of 80 at D = 128 (dQ computed transposed,\n"
      "dQ^T = K^T.dS^T, one dQ buffer); at D = 64 the same kernel as dq_before_dk.\n"
      "heavy_first: tiles_of_80's with, under the causal mask, the blocks that see the most queries\n"
      "started first (key tile 0 of four heads, then key tile 1, ...); without the mask the same\n"
      "kernel as tiles_of_80.\n"
      "split_tail (the stage's kernel): heavy_first's with, without the mask, the last wave's key\n"
      "tiles walked by several blocks each (a share of the query tiles each, dK and dV added into\n"
      "float32 sums, converted after); with the mask heavy_first's work.\n"
      "deterministic: tiles_of_80's with dQ added key tile by key tile for each query tile (a counter\n"
      "per query tile, the blocks in the order the turns need): the same dQ bit for bit on every run.\n"
      "D = rowsum(dO*O), LSE*log2e and the dQ conversion: stage 08's kernels, shared in common/\n"
      "(fa/cuda/backward). The forward is stage 09's. D = 64 and 128; at D = 256 one kernel, the\n"
      "stage's variant's (split_columns.cuh: both warpgroups on 64 keys, each half of D's columns).\n"
      "memory beyond Q, K, V, O, LSE, dO and the gradients: two floats per query row (D and\n"
      "LSE*log2e) and dQ's float32 accumulator.\n"
      "verification: float64 on all rows up to 4e9 FLOPs, sampled rows beyond, against the error of a\n"
      "plain backward that rounds P and dS to the dtype (fa/backward.hpp).\n"
      "08 flash: stage 08's backward (mma.sync, after stage 07's forward) on the same inputs.\n"
      "--paper-shapes: B = 16384 / N and H = 2048 / D (the FlashAttention papers' sweep).\n"
      "backward files: --load also reads do.npy; --save also writes dq.npy dk.npy dv.npy and do.npy";
  fa::StageCli cli(spec);
  bool paper_shapes = false;
  cli.app().add_flag("--paper-shapes", paper_shapes, "B = 16384 / N and H = 2048 / D at each N")->group("stage 10");
  if (const auto exit_code = cli.parse(argc, argv)) return *exit_code;
  fa::RunOptions& opt = cli.options();

  fa::StageDefinition def;
  def.id = "10";
  def.pass = fa::Pass::backward;
  // The ladder's rungs in order, each launched the stage's way; kStageRung (rung 14) is the stage's kernel.
  const auto rung = [](fa::step10::Rung r) {
    return [r](const fa::Problem& p, const fa::AttentionInputs& in, fa::ConstTensorView o, fa::ConstTensorView lse,
               fa::ConstTensorView d_o, const fa::AttentionGradients& g, fa::DeviceContext& ctx) {
      fa::step10::attention_backward_rung(r, p, in, o, lse, d_o, g, ctx);
    };
  };
  def.variants.push_back(fa::gpu_backward_variant("10", "wgmma", /*ours=*/true, fa::step10::attention_forward,
                                                  rung(fa::step10::Rung::wgmma)));
  def.variants.push_back(fa::gpu_backward_variant("10", "rows_in_shared", /*ours=*/true,
                                                  fa::step10::attention_forward, rung(fa::step10::Rung::rows_in_shared)));
  def.variants.push_back(fa::gpu_backward_variant("10", "dq_by_tma", /*ours=*/true, fa::step10::attention_forward,
                                                  rung(fa::step10::Rung::dq_by_tma)));
  def.variants.push_back(fa::gpu_backward_variant("10", "own_dq", /*ours=*/true, fa::step10::attention_forward,
                                                  rung(fa::step10::Rung::own_dq)));
  def.variants.push_back(fa::gpu_backward_variant("10", "stmatrix", /*ours=*/true, fa::step10::attention_forward,
                                                  rung(fa::step10::Rung::ds_by_stmatrix)));
  def.variants.push_back(fa::gpu_backward_variant("10", "three_groups", /*ours=*/true, fa::step10::attention_forward,
                                                  rung(fa::step10::Rung::three_groups)));
  def.variants.push_back(fa::gpu_backward_variant("10", "group_barrier", /*ours=*/true, fa::step10::attention_forward,
                                                  rung(fa::step10::Rung::group_barrier)));
  def.variants.push_back(fa::gpu_backward_variant("10", "wide_query_tiles", /*ours=*/true,
                                                  fa::step10::attention_forward, rung(fa::step10::Rung::wide_query_tiles)));
  def.variants.push_back(fa::gpu_backward_variant("10", "fast_exp", /*ours=*/true, fa::step10::attention_forward,
                                                  rung(fa::step10::Rung::fast_exp)));
  def.variants.push_back(fa::gpu_backward_variant("10", "dq_before_dk", /*ours=*/true, fa::step10::attention_forward,
                                                  rung(fa::step10::Rung::dq_before_dk)));
  def.variants.push_back(fa::gpu_backward_variant("10", "dv_early", /*ours=*/true, fa::step10::attention_forward,
                                                  rung(fa::step10::Rung::dv_early)));
  def.variants.push_back(fa::gpu_backward_variant("10", "tiles_of_80", /*ours=*/true, fa::step10::attention_forward,
                                                  rung(fa::step10::Rung::tiles_of_80)));
  def.variants.push_back(fa::gpu_backward_variant("10", "heavy_first", /*ours=*/true, fa::step10::attention_forward,
                                                  rung(fa::step10::Rung::heavy_first)));
  def.variants.push_back(fa::gpu_backward_variant("10", "split_tail", /*ours=*/true, fa::step10::attention_forward,
                                                  rung(fa::step10::Rung::split_tail)));
  def.variants.push_back(fa::gpu_backward_variant("10", "deterministic", /*ours=*/true, fa::step10::attention_forward,
                                                  rung(fa::step10::Rung::deterministic)));
  // The previous stage beside it, same dtype: the chart's comparison.
  def.variants.push_back(fa::gpu_backward_variant("08", "flash", /*ours=*/false, fa::step08::attention_forward,
                                                  [](const fa::Problem& p, const fa::AttentionInputs& in,
                                                     fa::ConstTensorView o, fa::ConstTensorView lse,
                                                     fa::ConstTensorView d_o, const fa::AttentionGradients& g,
                                                     fa::DeviceContext& ctx) {
                                                    fa::step08::attention_backward(p, in, o, lse, d_o, g, ctx);
                                                  }));
  def.verify.max_full_flops = 4e9;  // the float64 backward on every row up to here, 24 sampled rows beyond
  def.verify.sampled_rows = 24;
  if (paper_shapes) {
    if (const std::string why = fa::use_paper_shapes(opt, def); !why.empty()) {
      std::cerr << spec.program << ": error: " << why << "\n";
      return fa::kExitUsage;
    }
  }
  fa::use_gpu_defaults(def, fa::kStageMinComputeCapability);
  def.skip_reason = fa::step10::skip_reason;  // 9.0 exactly, not "9.0 or newer"
  return fa::run_stage(cli, def);
}
