// ladder.cuh — stage 07 as a ladder: the tensor-core forward built up one idea at a time, each
// rung a working kernel, verified against float64 and against the rung below it
// (tests/test_ladder.cu), measured by the stage executable (`--ladder`), told in
// docs/07_tensor_cores.md, "The ladder, measured". `diff` between neighbouring files is the lesson;
// each rung's header says what it adds, what it was expected to gain and what it gained.
//
//   v1_mma        v1_mma.cuh        mma.sync; fragments gathered by 32-bit shared loads from plain
//                                   tiles; P through shared memory; synchronous copies
//   v2_ldmatrix   v2_ldmatrix.cuh   ldmatrix(.trans) and the XOR-swizzled layout: no bank conflicts
//   v3_cp_async   v3_cp_async.cuh   K/V by cp.async into two buffers each: copies behind the math
//   v4_registers  v4_registers.cuh  P stays in registers as the A operand of P·V (the
//                                   accumulator → operand identity)
//   v5_addresses  v5_addresses.cuh  the loop's integer work out: ldmatrix addresses from one register
//                                   per operand, whole K/V tiles copied unchecked; the stage's
//                                   kernel at 16 rows per warp
//   flash         ../flash_tc_kernel.cuh at 32 rows per warp (the stage): each K/V fragment feeds
//                                   two mma's, half the shared-memory reads per FLOP
//
// Every rung: fp16 or bf16, D = 64 and 128 (the stage's kernel: also 32, 96, 256), 4 warps, Bc = 64,
// causal with stage 05's bounds and its heaviest-first order. Nothing is allocated.
#pragma once

#include <cstdint>
#include <string>

#include "07_tensor_cores/tensor_cores.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/problem.hpp"
#include "fa/tensor.hpp"

namespace fa::step07::ladder {

void v1_mma(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx);
void v2_ldmatrix(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx);
void v3_cp_async(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx);
void v4_registers(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx);
void v5_addresses(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx);

using RungForward = void (*)(const Problem&, const AttentionInputs&, const AttentionOutputs&, DeviceContext&);
struct Rung {
  const char* name;  // the variant name in the results; the top rung is "flash"
  const char* idea;  // what it adds to the rung below
  RungForward forward;
  bool every_dim;    // false: D = 64 and 128 only (the ladder's measurements are made there)
  bool runs(std::int64_t dim) const { return every_dim || dim == 64 || dim == 128; }
};

// Bottom to top; the last rung is the stage's own kernel.
inline constexpr Rung kLadder[] = {
    {"v1_mma", "mma.sync m16n8k16; 32-bit fragment loads from plain tiles; P through shared memory", &v1_mma, false},
    {"v2_ldmatrix", "ldmatrix(.trans) from XOR-swizzled tiles: no bank conflicts", &v2_ldmatrix, false},
    {"v3_cp_async", "cp.async, two K and two V buffers: the copies behind the math", &v3_cp_async, false},
    {"v4_registers", "P kept in registers as the A operand of P.V", &v4_registers, false},
    {"v5_addresses", "ldmatrix addresses from one register per operand; whole K/V tiles copied unchecked",
     &v5_addresses, false},
    {"flash", "32 query rows per warp: each K/V fragment feeds two mma's", &attention_forward, true},
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

}  // namespace fa::step07::ladder
