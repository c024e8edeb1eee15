// ladder.cuh — stage 08 as a ladder: the tensor-core backward built up one idea at a time, each
// rung a working backward (the stage's preprocessing and dQ conversion around another key-tile
// kernel), verified against float64 and against the rung below it (tests/test_ladder.cu), measured
// by the stage executable (`--ladder`), told in docs/08_tensor_core_backward.md. `diff` between
// neighbouring files is the lesson.
//
//   v1_mma        v1_mma.cuh        mma.sync for the five products; fragments gathered by 32-bit
//                                   (and paired 16-bit) shared loads from plain tiles; Pᵀ and dSᵀ
//                                   through shared memory; synchronous copies
//   v2_ldmatrix   v2_ldmatrix.cuh   ldmatrix(.trans) from XOR-swizzled tiles: no bank conflicts,
//                                   one instruction per fragment
//   v3_cp_async   v3_cp_async.cuh   Q, dO and the rows' numbers by cp.async into two buffers: the
//                                   copies behind the math
//   v4_registers  ../backward_tc_kernel.cuh, 8 warps of 16 keys: Pᵀ and dSᵀ stay in registers as the
//                                   A operands of dV and dK (the accumulator → operand identity);
//                                   only dSᵀ goes to shared memory, for dQ
//   flash         ../backward_tc_kernel.cuh at the stage's shapes: 32 keys a warp (D = 64) or two
//                                   warps per 32 keys (D = 128): each Q/dO fragment feeds two key
//                                   blocks; the grid order by shape (a head's key tiles first from
//                                   8k keys on, and always at D = 64 without the mask)
//
// Every rung: fp16 or bf16, D = 64 and 128 (the stage's kernel: also 32, 96, 256), 8 warps of 16
// keys (Bc = 128) and query tiles of 64 up to v4, causal with tile skipping, dQ by float atomics.
#pragma once

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
// The stage's backward with its default options (atomic dQ).
void flash(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse, ConstTensorView d_o,
           const AttentionGradients& grads, DeviceContext& ctx);

using RungBackward = void (*)(const Problem&, const AttentionInputs&, ConstTensorView, ConstTensorView, ConstTensorView,
                              const AttentionGradients&, DeviceContext&);
struct Rung {
  const char* name;  // the variant name in the results; the top rung is "flash"
  const char* idea;  // what it adds to the rung below
  RungBackward backward;
};

// Bottom to top; the last rung is the stage's own kernel.
inline constexpr Rung kLadder[] = {
    {"v1_mma", "mma.sync m16n8k16; 32-bit fragment loads from plain tiles; P^T, dS^T through shared memory", &v1_mma},
    {"v2_ldmatrix", "ldmatrix(.trans) from XOR-swizzled tiles: no bank conflicts", &v2_ldmatrix},
    {"v3_cp_async", "cp.async, two Q and two dO buffers: the copies behind the math", &v3_cp_async},
    {"v4_registers", "P^T, dS^T kept in registers as the A operands of dV, dK", &v4_registers},
    {"flash", "32 keys a warp (or a pair of warps per 32 keys): each Q/dO fragment feeds two key blocks", &flash},
};

}  // namespace fa::step08::ladder
