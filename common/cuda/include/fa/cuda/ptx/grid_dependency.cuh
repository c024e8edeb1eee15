// grid_dependency.cuh — programmatic dependent launch (PDL, compute capability 9.0): a kernel that
// may start before the kernel ahead of it in the stream has finished. Stage 11's decoding kernel
// (decode_kernel.cuh: the wait only) and read_cache (both) use it: a step of a few microseconds pays
// a launch and a ramp that a stream of steps can overlap (docs/11_decoding.md, "A step among steps"). Kept beside the
// stage that teaches it; once the stage is done it may move to fa/cuda/ptx/ (its README says when).
//
// A kernel launched with cudaLaunchAttributeProgrammaticStreamSerialization = 1 may begin once every
// block of the kernel before it has called allow_next_grid() or exited, instead of once that whole
// grid has finished and its writes reached memory. Its blocks then run beside the previous grid's
// on the SMs that grid leaves free, and must not read what that grid writes before:
//   wait_for_previous_grid()  griddepcontrol.wait: returns when the previous grid has completed and
//                             its memory writes are visible (at once when launched without the
//                             attribute, or with nothing before it);
//   allow_next_grid()         griddepcontrol.launch_dependents: this block no longer holds back the
//                             launch of the next grid; it orders nothing (the next grid's wait does).
//                             Where a kernel calls it decides where the next grid's blocks land:
//                             the decoding kernel never does, because a next step started early put
//                             its clusters two to a GPC (decode_kernel.cuh's header).
// Whatever a kernel does before its wait must touch only memory that no earlier kernel in the stream
// writes (stage 11: the old keys of the cache). Below compute capability 9.0 both are no-ops and
// the host never sets the attribute.
//
// Inline PTX, as CUDA's cudaGridDependencySynchronize() and cudaTriggerProgrammaticLaunchCompletion()
// compile to: the PTX names say what the hardware does.
#pragma once

#include <cuda_runtime.h>

namespace fa::ptx {

__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_next_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

}  // namespace fa::ptx
