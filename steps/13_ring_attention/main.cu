// step13_ring_attention — runs stage 13's ring across the visible GPUs (or --gpus N), forward or
// --backward, beside the single-GPU kernel it runs on each block (stage 09 on an H100/H200, stage 07
// elsewhere; for the backward stage 10 on an H100/H200 at D = 64, 128, 256, stage 08 elsewhere) on the
// whole sequence on GPU 0; verifies the ring against float64 (all or sampled rows, the 16-bit rule
// of docs/tolerance.md) and, forward, against that single-GPU kernel on every row where the
// sequence fits one GPU.
//
//   build/steps/13_ring_attention/step13_ring_attention                         every visible GPU, the default sweep
//   build/steps/13_ring_attention/step13_ring_attention --gpus 2 --seq 128k --causal
//   build/steps/13_ring_attention/step13_ring_attention --gpus 2 --seq 128k --causal --backward
//   build/steps/13_ring_attention/step13_ring_attention --gpus 4 --transport copy   four ranks on fewer GPUs
#include <iostream>

#include "13_ring_attention/lab/ring_timeline.cuh"
#include "13_ring_attention/ring_stage.cuh"
#include "fa/stage.hpp"

int main(int argc, char** argv) {
  fa::CliSpec spec;
  spec.program = "step13_ring_attention";
  spec.summary = "one sequence across GPUs: K/V blocks around a ring (NCCL), merged by the online-softmax rule (GPUs)";
  spec.defaults.batch = 1;
  spec.defaults.heads = 16;
  spec.defaults.dim = 128;
  spec.defaults.dtype = fa::DType::bfloat16;
  spec.default_sweep = {4096, 16384};
  spec.supports = fa::step13::kSupports;
  spec.variants = {"ring", "ring_serial", "ring_contiguous"};
  spec.notes =
      "ring: the --split (zigzag by default) across --gpus ranks; each block is the single-GPU kernel (stage 09's\n"
      "overlap rung on compute capability 9.0, stage 07 elsewhere; backward: stage 10 there at D = 64/128/256,\n"
      "stage 08 elsewhere), merged in float32; the next block's hop runs on a second stream under the current\n"
      "block.\n"
      "ring_serial: the same with each hop after its step (what the overlap is worth, measured).\n"
      "ring_contiguous: the contiguous split (causal: the imbalance that zigzag removes, measured).\n"
      "compared with: the single-GPU kernel on the whole sequence on GPU 0.\n"
      "memory: per GPU, the largest rank's (measured on its own meter): its chunks' Q, O, LSE, K/V, plus\n"
      "two K/V blocks in flight and the float32 accumulators.\n"
      "time: CUDA events on GPU 0, which every rank waits for and joins; --gpus 1 is the ring on one GPU.";
  fa::StageCli cli(spec);
  fa::step13::RingCommandLine ring_cli;
  ring_cli.add_to(cli.app());
  if (const auto exit_code = cli.parse(argc, argv)) return *exit_code;

  fa::step13::RingOptions ring;
  try {
    ring = ring_cli.ring_options(cli.options());
  } catch (const fa::UsageError& e) {
    std::cerr << spec.program << ": error: " << e.what() << "\n";
    return fa::kExitUsage;
  }
  if (!ring_cli.timeline_path.empty())
    return fa::step13::write_ring_timeline(cli.options(), ring, ring_cli.pass(), ring_cli.timeline_path);
  return fa::run_stage(cli, fa::step13::ring_stage(ring, ring_cli.pass(), !ring_cli.no_one_gpu));
}
