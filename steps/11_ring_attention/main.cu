// step11_ring_attention — runs stage 11's ring across the visible GPUs (or --gpus N), forward or
// --backward, beside the single-GPU kernel it runs on each block (stage 09 on an H100/H200, stage 07
// elsewhere; stage 08 for the backward) on the whole sequence on GPU 0; verifies the ring against
// float64 (all or sampled rows, the 16-bit rule of docs/tolerance.md) and, forward, against that
// single-GPU kernel on every row where the sequence fits one GPU.
//
//   build/steps/11_ring_attention/step11_ring_attention                         every visible GPU, the default sweep
//   build/steps/11_ring_attention/step11_ring_attention --gpus 2 --seq 128k --causal
//   build/steps/11_ring_attention/step11_ring_attention --gpus 2 --seq 128k --causal --backward
//   build/steps/11_ring_attention/step11_ring_attention --gpus 4 --transport copy   four ranks on fewer GPUs
#include <cuda_runtime.h>

#include <algorithm>
#include <iostream>
#include <string>

#include "11_ring_attention/ring_gpu.cuh"
#include "11_ring_attention/ring_model.hpp"
#include "fa/cuda/device.cuh"
#include "fa/cuda/stage_arch.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/stage.hpp"

int main(int argc, char** argv) {
  fa::CliSpec spec;
  spec.program = "step11_ring_attention";
  spec.summary = "one sequence across GPUs: K/V blocks around a ring (NCCL), merged by the online-softmax rule (GPUs)";
  spec.defaults.batch = 1;
  spec.defaults.heads = 16;
  spec.defaults.dim = 128;
  spec.defaults.dtype = fa::DType::bfloat16;
  spec.default_sweep = {4096, 16384};
  spec.supports = fa::step11::kSupports;
  spec.variants = {"ring", "ring_serial", "ring_contiguous"};
  spec.notes =
      "ring: the --split (zigzag by default) across --gpus ranks; each block is the single-GPU kernel (stage 09's\n"
      "overlap rung on compute capability 9.0, stage 07 elsewhere; stage 08 backward), merged in float32; the next\n"
      "block's hop runs on a second stream under the current block.\n"
      "ring_serial: the same with each hop after its step (what the overlap is worth, measured).\n"
      "ring_contiguous: the contiguous split (causal: the imbalance that zigzag removes, measured).\n"
      "compared with: the single-GPU kernel on the whole sequence on GPU 0.\n"
      "memory: per GPU, the largest rank's (measured on its own meter): its chunks' Q, O, LSE, K/V, plus\n"
      "two K/V blocks in flight and the float32 accumulators.\n"
      "time: CUDA events on GPU 0, which every rank waits for and joins; --gpus 1 is the ring on one GPU.";
  fa::StageCli cli(spec);
  int gpus = 0;
  std::string split = "zigzag", transport = "nccl";
  bool backward = false;
  cli.app().add_option("--gpus", gpus, "ranks of the ring (default: every visible GPU)")->check(CLI::Range(1, 64))->group("stage 11");
  cli.app().add_option("--split", split, "zigzag or contiguous (variants ring and ring_serial)")->group("stage 11");
  cli.app().add_option("--transport", transport, "nccl, or copy (cudaMemcpyPeerAsync; ranks may share a GPU)")->group("stage 11");
  cli.app().add_flag("--backward", backward, "time and verify the backward (dQ, dK, dV) instead of the forward")->group("stage 11");
  if (const auto exit_code = cli.parse(argc, argv)) return *exit_code;

  fa::step11::RingOptions ring;
  try {
    ring.split = fa::step11::parse_split(split);
    ring.transport = fa::step11::parse_transport(transport);
    fa::Problem each = cli.options().problem;  // the lengths live in sizes: every case must be self-attention
    for (const auto& [nq, nk] : cli.options().sizes) {
      each.seq_q = nq;
      each.seq_k = nk;
      fa::step11::require_ring_problem(each, 1);
    }
  } catch (const fa::UsageError& e) {
    std::cerr << spec.program << ": error: " << e.what() << "\n";
    return fa::kExitUsage;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  ring.gpus = gpus > 0 ? gpus : std::max(devices, 1);
  // The single-GPU kernel beside the ring: stage 09's on compute capability 9.0, stage 07's elsewhere.
  const bool hopper = devices > 0 && fa::query_device(0).compute_major == 9 && fa::query_device(0).compute_minor == 0;

  fa::StageDefinition def;
  def.id = "11";
  def.pass = backward ? fa::Pass::backward : fa::Pass::forward;
  fa::step11::RingOptions serial = ring, contiguous = ring;
  serial.overlap = false;
  contiguous.split = fa::step11::Split::contiguous;
  def.variants.push_back(fa::step11::ring_variant("ring", ring, def.pass));
  def.variants.push_back(fa::step11::ring_variant("ring_serial", serial, def.pass));
  if (ring.split != fa::step11::Split::contiguous)
    def.variants.push_back(fa::step11::ring_variant("ring_contiguous", contiguous, def.pass));
  // The single-GPU kernel on the whole sequence, on GPU 0: the comparison, and the forward's second opinion.
  if (backward) {
    def.variants.push_back(fa::gpu_backward_variant("08", "one_gpu", /*ours=*/false, fa::step11::local_forward,
                                                    fa::step11::local_backward));
  } else {
    def.variants.push_back(fa::gpu_variant(hopper ? "09" : "07", "one_gpu", /*ours=*/false, fa::step11::local_forward));
    def.verify.previous = fa::PreviousStage{"one GPU", fa::gpu_forward(fa::step11::local_forward)};
  }
  fa::use_gpu_defaults(def, fa::kStageMinComputeCapability);
  def.skip_reason = [ring] { return fa::step11::ring_refusal(ring); };
  return fa::run_stage(cli, def);
}
