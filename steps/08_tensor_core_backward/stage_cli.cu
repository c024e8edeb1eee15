// stage_cli.cu — see stage_cli.cuh.
#include "08_tensor_core_backward/stage_cli.cuh"

#include "08_tensor_core_backward/ladder/ladder.cuh"
#include "08_tensor_core_backward/tensor_core_backward.cuh"

namespace fa::step08 {

CliSpec stage_cli_spec() {
  CliSpec spec;
  spec.program = "step08_tensor_core_backward";
  spec.summary = "FlashAttention-2's backward on tensor cores: fp16/bf16, mma.sync, dQ by float atomics (GPU)";
  spec.defaults.batch = 1;
  spec.defaults.heads = 16;
  spec.defaults.dim = 64;
  spec.defaults.dtype = DType::bfloat16;
  spec.default_sweep = {512, 1024, 2048, 4096};
  spec.supports = kSupports;
  spec.variants = {"flash-deterministic", "flash-float32"};
  for (const auto& rung : ladder::kLadder) spec.variants.emplace_back(rung.name);
  spec.notes =
      "kernel: one block per tile of keys (D = 64: warps of 32 keys, query tiles of 32; D = 128: a\n"
      "pair of warps per 32 keys, query tiles of 64; D = 256: a pair per 16 keys; D = 32, 96: warps of\n"
      "16 keys); a pair divides the products: one warp S^T, P^T and dV, the other dP^T, dS^T and dK,\n"
      "P^T passed in fp16 through shared memory, dS^T signalled on a named barrier before dK so that\n"
      "the two warps' second products overlap. Query tiles streamed (cp.async, two buffers),\n"
      "mma.sync.m16n8k16 for S^T, dP^T, dV, dK and dQ; dQ by float atomics into a float32 buffer,\n"
      "then converted. The forward is stage 07's.\n"
      "memory beyond Q, K, V, O, LSE, dO and the gradients: two floats per query row (D = rowsum(dO*O)\n"
      "and LSE*log2e) and, without --deterministic, dQ's float32 accumulator; measured.\n"
      "verification: float64 on all rows up to 4e9 FLOPs, sampled rows beyond, against the error of a\n"
      "plain backward that rounds P and dS to the dtype (fa/backward.hpp).\n"
      "--deterministic: dQ by a second kernel over query tiles, in registers, in a fixed order (bitwise\n"
      "                reproducible; S and dP computed twice); the variant is then flash-deterministic.\n"
      "flash-float32: stage 06 (after stage 05) on float32 copies of the inputs (D = 32, 64, 128).\n"
      "the ladder (--ladder; --variant NAME runs one rung; D = 64 and 128): v1_mma, v2_ldmatrix,\n"
      "v3_cp_async, v4_registers, v5_whole_tiles, v6_two_key_blocks, v7_named_barrier, flash (the\n"
      "stage's kernel).\n"
      "--paper-shapes: B = 16384 / N and H = 2048 / D (the FlashAttention papers' sweep).\n"
      "backward files: --load also reads do.npy; --save also writes dq.npy dk.npy dv.npy and do.npy";
  return spec;
}

}  // namespace fa::step08
