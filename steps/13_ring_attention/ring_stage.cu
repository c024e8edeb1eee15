// ring_stage.cu — stage 13's options and variants for the harness (see ring_stage.cuh).
#include "13_ring_attention/ring_stage.cuh"

#include <cuda_runtime.h>

#include <algorithm>

#include "08_tensor_core_backward/tensor_core_backward.cuh"
#include "09_hopper/hopper.cuh"
#include "10_hopper_backward/hopper_backward.cuh"
#include "13_ring_attention/ring_model.hpp"
#include "fa/cuda/stage_arch.cuh"
#include "fa/cuda/stage_gpu.cuh"

namespace fa::step13 {

void RingCommandLine::add_to(CLI::App& app) {
  app.add_option("--gpus", gpus, "ranks of the ring (default: every visible GPU)")->check(CLI::Range(1, 64))->group("stage 13");
  app.add_option("--split", split, "zigzag or contiguous (variants ring and ring_serial)")->group("stage 13");
  app.add_option("--transport", transport, "nccl, or copy (cudaMemcpyPeerAsync; ranks may share a GPU)")->group("stage 13");
  app.add_flag("--backward", backward, "time and verify the backward (dQ, dK, dV) instead of the forward")->group("stage 13");
  app.add_flag("--no-one-gpu", no_one_gpu,
               "without the single-GPU kernel beside the ring and its check (a long sequence: it would take as long "
               "as the ring on one GPU, where it fits)")
      ->group("stage 13");
  app.add_flag("--no-overlap", no_overlap, "the ring's hops after each step, not under it (for --timeline)")->group("stage 13");
  app.add_option("--timeline", timeline_path,
                 "instead of the sweep: one run of the ring at the last length, its steps and hops per rank as JSON "
                 "(docs/plots/draw_ring_timeline.py draws it)")
      ->group("stage 13");
}

RingOptions RingCommandLine::ring_options(const RunOptions& run) const {
  RingOptions ring;
  ring.split = parse_split(split);
  ring.transport = parse_transport(transport);
  ring.overlap = !no_overlap;
  Problem each = run.problem;  // the lengths live in sizes: every case must be self-attention
  for (const auto& [nq, nk] : run.sizes) {
    each.seq_q = nq;
    each.seq_k = nk;
    require_ring_problem(each, 1);
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  ring.gpus = gpus > 0 ? gpus : std::max(devices, 1);
  return ring;
}

StageDefinition ring_stage(const RingOptions& ring, Pass pass, bool with_one_gpu) {
  StageDefinition def;
  def.id = "13";
  def.pass = pass;
  RingOptions serial = ring, contiguous = ring;
  serial.overlap = false;
  contiguous.split = Split::contiguous;
  def.variants.push_back(ring_variant("ring", ring, pass));
  def.variants.push_back(ring_variant("ring_serial", serial, pass));
  if (ring.split != Split::contiguous) def.variants.push_back(ring_variant("ring_contiguous", contiguous, pass));
  // The single-GPU kernels on the whole sequence, on GPU 0: stage 09's forward and stage 10's
  // backward on compute capability 9.0 (stage 10 refuses D = 256 there: the row says skipped),
  // stage 07's and stage 08's elsewhere.
  int devices = 0;
  if (with_one_gpu && cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  if (with_one_gpu && pass == Pass::backward) {
    const bool hopper = devices > 0 && step09::runs_here();
    const DeviceBackward stage08 = [](const Problem& p, const AttentionInputs& in, ConstTensorView o,
                                      ConstTensorView lse, ConstTensorView d_o, const AttentionGradients& g,
                                      DeviceContext& ctx) {
      step08::attention_backward(p, in, o, lse, d_o, g, ctx);  // its default options
    };
    def.variants.push_back(gpu_backward_variant(hopper ? "10" : "08", "one_gpu", /*ours=*/false,
                                                step09::fastest_forward,
                                                hopper ? DeviceBackward(step10::attention_backward) : stage08));
  } else if (with_one_gpu) {
    const std::string one_gpu_stage = devices > 0 ? step09::fastest_forward_stage() : "07";
    def.variants.push_back(gpu_variant(one_gpu_stage, "one_gpu", /*ours=*/false, step09::fastest_forward));
    def.verify.previous = PreviousStage{"one GPU", gpu_forward(step09::fastest_forward)};
  }
  use_gpu_defaults(def, kStageMinComputeCapability);
  def.skip_reason = [ring] { return ring_refusal(ring); };
  return def;
}

}  // namespace fa::step13
