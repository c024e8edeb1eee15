// warp_roles.cuh — moving registers between warpgroups (sm_90a): setmaxnreg, taught in stage 09;
// and the named barriers by which warpgroups signal each other (first used in stage 08).
//
// A kernel launched with T threads gets at most 65536 / T registers per thread, the same for
// every warp. With warp specialization that is wasteful: the producer warpgroup only issues TMA
// copies and needs few, the consumers hold the S and O accumulators and need many. After the
// roles are decided, each warpgroup changes its own budget:
//   setmaxnreg.dec.sync.aligned.u32 N   release registers down to N per thread (the producer)
//   setmaxnreg.inc.sync.aligned.u32 N   wait for and take registers up to N per thread (consumers)
// N is a multiple of 8 in [24, 256]; all threads of a warpgroup execute it together. ptxas
// allocates the code after each call within its new budget, which is why each role's code sits
// in one branch of its own (otherwise ptxas warns and ignores the calls). The budgets must add up:
// 128·(producer) + 128·k·(consumer) ≤ 65536 for k consumer warpgroups.
//
// Named barriers (ping-pong between consumer warpgroups): fa/cuda/ptx/barrier.cuh, first used in
// stage 08. A warpgroup that syncs (128) and one that arrives (128) on the same id with n = 256 form a
// one-way signal: the syncing warpgroup waits for the arriving one.
//
// Inline PTX: CCCL (CUDA 13.0) has no wrapper for setmaxnreg.
#pragma once

#include "fa/cuda/hopper/wgmma.cuh"  // FA_HAVE_WGMMA: the same sm_90a target
#include "fa/cuda/ptx/barrier.cuh"

namespace fa::hopper {

template <int N>
__device__ __forceinline__ void release_registers() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg: a multiple of 8 in [24, 256]");
#if FA_HAVE_WGMMA
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
template <int N>
__device__ __forceinline__ void take_registers() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg: a multiple of 8 in [24, 256]");
#if FA_HAVE_WGMMA
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

using ptx::named_barrier_arrive;
using ptx::named_barrier_sync;

}  // namespace fa::hopper
