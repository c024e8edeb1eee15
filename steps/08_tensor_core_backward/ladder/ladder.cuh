// ladder.cuh — stage 08 as a ladder: the tensor-core backward built up one idea at a time, each
// rung a working backward (the stage's preprocessing and dQ conversion around another key-tile
// kernel), verified against float64 and against the rung below it (tests/test_ladder.cu), measured
// by the stage executable (`--ladder`), told in docs/08_tensor_core_backward.md. `diff` between
// neighbouring files is the lesson.
//
//   v1_mma             v1_mma.cuh             mma.sync for the five products; fragments gathered
//                                             by 32-bit (and paired 16-bit) shared loads from plain
//                                             tiles; Pᵀ and dSᵀ through shared memory; synchronous
//                                             copies
//   v2_ldmatrix        v2_ldmatrix.cuh        ldmatrix(.trans) from XOR-swizzled tiles: no bank
//                                             conflicts, one instruction per fragment
//   v3_cp_async        v3_cp_async.cuh        Q, dO and the rows' numbers by cp.async into two
//                                             buffers: the copies behind the math
//   v4_registers       v4_registers.cuh       Pᵀ and dSᵀ stay in registers as the A operands of dV
//                                             and dK; only dSᵀ goes to shared memory, for dQ
//   v5_whole_tiles     v5_whole_tiles.cuh     every copy a whole tile by cp.async from one pointer
//                                             plus constants, unchecked (K and V too); 32-bit
//                                             shared addresses; the stage's config, rows counted
//   v6_two_key_blocks  v6_two_key_blocks.cuh  two 16-key blocks behind every Q/dO fragment: 32 keys
//                                             a warp (D = 64, query tiles of 32), or a pair of
//                                             warps per 32 keys dividing the products (D = 128)
//   v7_named_barrier   v7_named_barrier.cuh   the pair hands dSᵀ over on a named barrier: its two
//                                             second products overlap (D = 64: v6's kernel)
//   flash              ../backward_tc_kernel.cuh  the grid order by shape: a head's key tiles on the
//                                             grid's fast axis where that measured faster
//
// v1 .. v5: 8 warps of 16 keys (Bc = 128) and query tiles of 64; v6 and above the stage's shapes.
// Every rung: fp16 or bf16, D = 64 and 128 (the stage's kernel: also 32, 96, 256), causal with tile
// skipping, dQ by float atomics. Each header says what its rung adds, what it was predicted to gain
// before it was measured, and what it gained.
#pragma once

#include <cstdint>
#include <string>

#include "08_tensor_core_backward/tensor_core_backward.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/problem.hpp"
#include "fa/tensor.hpp"

namespace fa::step08::ladder {

void v1_mma(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse, ConstTensorView d_o,
            const AttentionGradients& grads, DeviceContext& ctx);
void v2_ldmatrix(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse,
                 ConstTensorView d_o, const AttentionGradients& grads, DeviceContext& ctx);
void v3_cp_async(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse,
                 ConstTensorView d_o, const AttentionGradients& grads, DeviceContext& ctx);
void v4_registers(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse,
                  ConstTensorView d_o, const AttentionGradients& grads, DeviceContext& ctx);
void v5_whole_tiles(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse,
                    ConstTensorView d_o, const AttentionGradients& grads, DeviceContext& ctx);
void v6_two_key_blocks(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse,
                       ConstTensorView d_o, const AttentionGradients& grads, DeviceContext& ctx);
void v7_named_barrier(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse,
                      ConstTensorView d_o, const AttentionGradients& grads, DeviceContext& ctx);
// The stage's backward with its default options (atomic dQ).
void flash(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse, ConstTensorView d_o,
           const AttentionGradients& grads, DeviceContext& ctx);

using RungBackward = void (*)(const Problem&, const AttentionInputs&, ConstTensorView, ConstTensorView, ConstTensorView,
                              const AttentionGradients&, DeviceContext&);
struct Rung {
  const char* name;  // the variant name in the results; the top rung is "flash"
  const char* idea;  // what it adds to the rung below
  RungBackward backward;
  bool every_dim;    // false: D = 64 and 128 only (the ladder's measurements are made there)
  bool runs(std::int64_t dim) const { return every_dim || dim == 64 || dim == 128; }
};

// Bottom to top; the last rung is the stage's own kernel.
inline constexpr Rung kLadder[] = {
    {"v1_mma", "mma.sync m16n8k16; 32-bit fragment loads from plain tiles; P^T, dS^T through shared memory", &v1_mma,
     false},
    {"v2_ldmatrix", "ldmatrix(.trans) from XOR-swizzled tiles: no bank conflicts", &v2_ldmatrix, false},
    {"v3_cp_async", "cp.async, two Q and two dO buffers: the copies behind the math", &v3_cp_async, false},
    {"v4_registers", "P^T, dS^T kept in registers as the A operands of dV, dK", &v4_registers, false},
    {"v5_whole_tiles", "whole tiles copied by cp.async, unchecked, K and V too; the stage's config", &v5_whole_tiles,
     false},
    {"v6_two_key_blocks", "two key blocks per Q/dO fragment: 32 keys a warp, or a pair dividing the products",
     &v6_two_key_blocks, false},
    {"v7_named_barrier", "the pair hands dS^T over on a named barrier: its second products overlap",
     &v7_named_barrier, false},
    {"flash", "the grid order by shape: a head's key tiles first where that is faster", &flash, true},
};

// For the stage's main: the one line that refuses `--variant NAME` at a head dim the rung does not
// run (exit 2), empty when it runs it (or NAME is no rung).
inline std::string rung_refusal(const std::string& name, std::int64_t dim) {
  for (const Rung& rung : kLadder)
    if (name == rung.name && !rung.runs(dim))
      return "--variant " + name + " runs D = 64 and 128 (the stage's kernel, flash, runs 32, 64, 96, 128, 256), not D = " +
             std::to_string(dim);
  return "";
}

}  // namespace fa::step08::ladder
