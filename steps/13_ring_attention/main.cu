// step13_ring_attention — runs stage 13's ring across the visible GPUs (or --gpus N), forward or
// --backward, beside the single-GPU kernel it runs on each block (stage 09 on an H100/H200, stage 07
// elsewhere; stage 08 for the backward) on the whole sequence on GPU 0; verifies the ring against
// float64 (all or sampled rows, the 16-bit rule of docs/tolerance.md) and, forward, against that
// single-GPU kernel on every row where the sequence fits one GPU.
//
//   build/steps/13_ring_attention/step13_ring_attention                         every visible GPU, the default sweep
//   build/steps/13_ring_attention/step13_ring_attention --gpus 2 --seq 128k --causal
//   build/steps/13_ring_attention/step13_ring_attention --gpus 2 --seq 128k --causal --backward
//   build/steps/13_ring_attention/step13_ring_attention --gpus 4 --transport copy   four ranks on fewer GPUs
#include <cuda_runtime.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <string>

#include "08_tensor_core_backward/tensor_core_backward.cuh"
#include "09_hopper/hopper.cuh"
#include "13_ring_attention/ring_gpu.cuh"
#include "13_ring_attention/ring_model.hpp"
#include "fa/cuda/device.cuh"
#include "fa/cuda/stage_arch.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/stage.hpp"

namespace {

// A JSON string's body: quotes and backslashes escaped (a command line may hold either).
std::string json_escaped(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// --timeline FILE: one warm-up run, then one recorded run of the ring at the last length; the spans
// as JSON (and a line per rank), for docs/plots/draw_ring_timeline.py.
int write_timeline(const fa::RunOptions& opt, const fa::step13::RingOptions& ring, fa::Pass pass,
                   const std::string& path) {
  if (const std::string why = fa::step13::ring_refusal(ring); !why.empty()) {
    std::cout << "skipped: " << why << "\n";
    return fa::kExitSkipped;
  }
  try {
    fa::check_writable_file(path, "--timeline");
    fa::Problem p = opt.problem;
    p.seq_q = opt.sizes.back().first;
    p.seq_k = opt.sizes.back().second;
    const fa::AttentionData in = fa::make_case_inputs(p, pass, opt.seed, opt.inputs);
    fa::step13::RingAttention r(p, ring, pass);
    r.load(in);
    for (int run = 0; run < 2; ++run) {  // a warm-up, then the recorded run
      r.record_timeline(run == 1);
      r.forward();
      if (pass == fa::Pass::backward) r.backward();
    }
    const std::vector<fa::step13::RingAttention::Span> spans = r.timeline();
    std::ofstream f(path);
    f << "{\n  \"device\": \"" << json_escaped(fa::query_device(0).name) << "\", \"gpus\": " << ring.gpus << ", \"split\": \""
      << fa::step13::to_string(ring.split) << "\", \"transport\": \"" << fa::step13::to_string(ring.transport)
      << "\", \"overlap\": " << (ring.overlap ? "true" : "false") << ", \"pass\": \"" << fa::to_string(pass)
      << "\",\n  \"batch\": " << p.batch << ", \"heads\": " << p.heads << ", \"seq\": " << p.seq_q << ", \"dim\": "
      << p.dim << ", \"causal\": " << (p.causal ? "true" : "false") << ", \"dtype\": \"" << fa::to_string(p.dtype)
      << "\", \"command\": \"" << json_escaped(opt.command_line) << "\",\n  \"spans\": [";
    for (std::size_t i = 0; i < spans.size(); ++i) {
      const auto& s = spans[i];
      f << (i ? "," : "") << "\n    {\"rank\": " << s.rank << ", \"lane\": \"" << s.lane << "\", \"what\": \"" << s.what
        << "\", \"step\": " << s.step << ", \"start_ms\": " << s.start_ms << ", \"end_ms\": " << s.end_ms << "}";
    }
    f << "\n  ]\n}\n";
    for (int rank = 0; rank < ring.gpus; ++rank) {
      double compute = 0.0, hops = 0.0, end = 0.0;
      for (const auto& s : spans)
        if (s.rank == rank) {
          (s.lane == "compute" ? compute : hops) += s.end_ms - s.start_ms;
          end = std::max(end, s.end_ms);
        }
      std::cout << "rank " << rank << ": computing " << compute << " ms, hops " << hops << " ms, last step ends at " << end
                << " ms\n";
    }
    std::cout << "timeline: " << path << "\n";
    return fa::kExitOk;
  } catch (const fa::UsageError& e) {
    std::cerr << "step13_ring_attention: error: " << e.what() << "\n";
    return fa::kExitUsage;
  }
}

}  // namespace

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
  bool backward = false, no_overlap = false, no_one_gpu = false;
  std::string timeline_path;
  cli.app().add_option("--gpus", gpus, "ranks of the ring (default: every visible GPU)")->check(CLI::Range(1, 64))->group("stage 13");
  cli.app().add_option("--split", split, "zigzag or contiguous (variants ring and ring_serial)")->group("stage 13");
  cli.app().add_option("--transport", transport, "nccl, or copy (cudaMemcpyPeerAsync; ranks may share a GPU)")->group("stage 13");
  cli.app().add_flag("--backward", backward, "time and verify the backward (dQ, dK, dV) instead of the forward")->group("stage 13");
  cli.app()
      .add_flag("--no-one-gpu", no_one_gpu,
                "without the single-GPU kernel beside the ring and its check (a long sequence: it would take as long "
                "as the ring on one GPU, where it fits)")
      ->group("stage 13");
  cli.app().add_flag("--no-overlap", no_overlap, "the ring's hops after each step, not under it (for --timeline)")->group("stage 13");
  cli.app()
      .add_option("--timeline", timeline_path,
                  "instead of the sweep: one run of the ring at the last length, its steps and hops per rank as JSON "
                  "(docs/plots/draw_ring_timeline.py draws it)")
      ->group("stage 13");
  if (const auto exit_code = cli.parse(argc, argv)) return *exit_code;

  fa::step13::RingOptions ring;
  try {
    ring.split = fa::step13::parse_split(split);
    ring.transport = fa::step13::parse_transport(transport);
    fa::Problem each = cli.options().problem;  // the lengths live in sizes: every case must be self-attention
    for (const auto& [nq, nk] : cli.options().sizes) {
      each.seq_q = nq;
      each.seq_k = nk;
      fa::step13::require_ring_problem(each, 1);
    }
  } catch (const fa::UsageError& e) {
    std::cerr << spec.program << ": error: " << e.what() << "\n";
    return fa::kExitUsage;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  ring.gpus = gpus > 0 ? gpus : std::max(devices, 1);
  // The single-GPU kernel beside the ring: stage 09's on compute capability 9.0, stage 07's elsewhere.
  const std::string one_gpu_stage = devices > 0 ? fa::step09::fastest_forward_stage() : "07";

  ring.overlap = !no_overlap;
  if (!timeline_path.empty()) return write_timeline(cli.options(), ring, backward ? fa::Pass::backward : fa::Pass::forward,
                                                    timeline_path);

  fa::StageDefinition def;
  def.id = "13";
  def.pass = backward ? fa::Pass::backward : fa::Pass::forward;
  fa::step13::RingOptions serial = ring, contiguous = ring;
  serial.overlap = false;
  contiguous.split = fa::step13::Split::contiguous;
  def.variants.push_back(fa::step13::ring_variant("ring", ring, def.pass));
  def.variants.push_back(fa::step13::ring_variant("ring_serial", serial, def.pass));
  if (ring.split != fa::step13::Split::contiguous)
    def.variants.push_back(fa::step13::ring_variant("ring_contiguous", contiguous, def.pass));
  // The single-GPU kernel on the whole sequence, on GPU 0: the comparison, and the forward's second opinion.
  if (!no_one_gpu && backward) {
    def.variants.push_back(fa::gpu_backward_variant(
        "08", "one_gpu", /*ours=*/false, fa::step09::fastest_forward,
        [](const fa::Problem& p, const fa::AttentionInputs& in, fa::ConstTensorView o, fa::ConstTensorView lse,
           fa::ConstTensorView d_o, const fa::AttentionGradients& g, fa::DeviceContext& ctx) {
          fa::step08::attention_backward(p, in, o, lse, d_o, g, ctx);  // its default options
        }));
  } else if (!no_one_gpu) {
    def.variants.push_back(fa::gpu_variant(one_gpu_stage, "one_gpu", /*ours=*/false, fa::step09::fastest_forward));
    def.verify.previous = fa::PreviousStage{"one GPU", fa::gpu_forward(fa::step09::fastest_forward)};
  }
  fa::use_gpu_defaults(def, fa::kStageMinComputeCapability);
  def.skip_reason = [ring] { return fa::step13::ring_refusal(ring); };
  return fa::run_stage(cli, def);
}
