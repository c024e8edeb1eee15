// barrier.cuh — named barriers: bar.sync and bar.arrive with a barrier id and a thread count (every
// architecture the course builds for). First used in stage 08 (the pair of warps of
// steps/08_tensor_core_backward/backward_tc_kernel.cuh), then in stage 09's ping-pong.
//
// A block has 16 hardware barriers; __syncthreads is barrier 0 over every thread. On barrier `id`:
//   bar.sync   id, n   waits until n threads (a multiple of 32, counting this one) have reached it;
//   bar.arrive id, n   counts this thread and goes on without waiting.
// When the barrier completes, the shared-memory writes that the counted threads made before it are
// visible to the threads that waited there. So warps that arrive and warps that sync on one id,
// with n counting both groups, form a one-way signal: the syncing warps wait for the arriving ones,
// never the other way round. A group that syncs alone (n = its own threads) waits only for itself.
// The id is a register operand here, so a kernel can choose it at run time (stage 09 alternates two).
// Called with constants (stage 08), the compiler writes them into the instruction; an id known only
// at run time makes ptxas reserve all 16 of the block's barriers.
//
// compute-sanitizer's racecheck (CUDA 13.0) reports hazards that are not there in one pattern: when,
// between two __syncthreads, the threads that arrive take fewer blocking barrier steps than the
// threads that sync. Minimal kernels, all race-free by the PTX rules above, measured on an H100
// (docs/results/step08_named_barriers_h100.txt): flagged where the arriving warps took one blocking
// step fewer per round, clean in the same call as soon as they took as many (a bar.sync among
// themselves, or the signal moved to where both sides take the same steps). Stage 08 uses the
// second form: clean, and no extra barrier.
//
// Inline PTX: CCCL's cuda::ptx (CUDA 13.0) wraps the cluster barriers and mbarriers, not bar.sync
// or bar.arrive with an id.
#pragma once

#include <cuda_runtime.h>

namespace fa::ptx {

__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace fa::ptx
