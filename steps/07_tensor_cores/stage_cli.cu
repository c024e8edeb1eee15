// stage_cli.cu — see stage_cli.cuh.
#include "07_tensor_cores/stage_cli.cuh"

#include "07_tensor_cores/ladder/ladder.cuh"
#include "07_tensor_cores/tensor_cores.cuh"

namespace fa::step07 {

CliSpec stage_cli_spec() {
  CliSpec spec;
  spec.program = "step07_tensor_cores";
  spec.summary = "FlashAttention-2's forward on tensor cores: fp16/bf16, mma.sync, P in registers (GPU)";
  spec.defaults.batch = 1;
  spec.defaults.heads = 16;
  spec.defaults.dim = 64;
  spec.defaults.dtype = DType::bfloat16;
  spec.default_sweep = {512, 1024, 2048, 4096};
  spec.supports = kSupports;
  for (const auto& rung : ladder::kLadder) spec.variants.emplace_back(rung.name);
  spec.variants.emplace_back("flash-in-order");
  spec.notes =
      "kernel: mma.sync.m16n8k16 (fp16/bf16 in, float32 accumulators), 4 warps of 32 query rows (Br = 128),\n"
      "Bc = 128 at D = 64, 64 at D = 32, 96, 128 (D = 256: 16 rows per warp, Bc = 32), K/V double-buffered\n"
      "by cp.async; D = 64, 128 fast, 32, 96, 256 correct.\n"
      "memory beyond Q, K, V, O, LSE: none (measured).\n"
      "verification: float64 on all rows up to 2e9 FLOPs, sampled rows beyond, against the error of a\n"
      "plain implementation that rounds P and O to the dtype (docs/tolerance.md); stage 05 in float32 on\n"
      "every row (D = 32, 64, 128).\n"
      "the ladder (--ladder; --variant NAME runs one rung): v1_mma, v2_ldmatrix, v3_cp_async,\n"
      "v4_registers, v5_addresses, flash (the stage's kernel);\n"
      "flash-in-order: causal tiles in their natural order.\n"
      "--paper-shapes: B = 16384 / N and H = 2048 / D (the FlashAttention papers' sweep).";
  return spec;
}

}  // namespace fa::step07
