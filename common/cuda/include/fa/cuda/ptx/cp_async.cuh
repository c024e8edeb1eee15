// cp_async.cuh — cp.async: 16 bytes global → shared without passing through registers (sm_80+).
// Taught in stage 04 (steps/04_cuda_flash_forward/flash_forward_kernel.cuh loads K and V with it).
//
// Each thread issues its copies, groups them (commit), and later waits for all but the newest N
// groups (wait<N>), then a __syncthreads makes every thread's copies visible to the block. The
// loads overlap the math on the tile before.
//
// Inline PTX: CCCL's cuda::ptx (CUDA 13.0) wraps the bulk copies (cp.async.bulk, Hopper's TMA) but
// not this one, and the 16-byte cp.async it issues inside cuda::memcpy_async has no src-size
// operand, the zero-fill we rely on; cuda::pipeline's commit/wait come with its own object and
// stage count. See README.md here.
//
// Before sm_80 (Turing, sm_75: the T4 of the free notebook services) there is no cp.async. There
// the three functions fall back to a plain copy: cp_async16 loads the 16 bytes into a register and
// stores them (zeros when !valid), commit and wait do nothing. The kernels stay correct unchanged:
// every copy has then landed before the thread's next instruction, so before the __syncthreads that
// the asynchronous path needs anyway; what is lost is only the overlap of the load with the math.
// FA_PTX_NO_CP_ASYNC (a compile definition) forces the fallback on every architecture, so that it
// is built for sm_90 and tested on a Hopper GPU too (the *_no_cp_async tests, cmake/FlashCourse.cmake).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#if defined(FA_PTX_NO_CP_ASYNC) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800)
#define FA_PTX_CP_ASYNC 0  // the synchronous fallback
#else
#define FA_PTX_CP_ASYNC 1  // cp.async (sm_80+); also the host pass, which never runs these
#endif

namespace fa::ptx {

// Copies 16 bytes from `gmem` to `smem` (both 16-byte aligned). `valid` = false zero-fills the
// destination instead (src-size 0: nothing is read, `gmem` need only be a valid address), which is
// how rows past the end of a tensor become zeros. .cg: through L2 only, bypassing L1 (allowed for
// 16-byte copies): the tile lives in shared memory, a copy in L1 would not be read again.
// Fallback: the same 16 bytes through a register, loaded .cg too (__ldcg), zeros when !valid.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
#if FA_PTX_CP_ASYNC
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0)
               : "memory");
#else
  *static_cast<int4*>(smem) = valid ? __ldcg(static_cast<const int4*>(gmem)) : make_int4(0, 0, 0, 0);
#endif
}

// The same to a 32-bit shared-window address (the form a kernel that computes its shared
// addresses once keeps them in: stage 07's kernel).
__device__ __forceinline__ void cp_async16(std::uint32_t smem, const void* gmem, bool valid) {
#if FA_PTX_CP_ASYNC
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(valid ? 16 : 0)
               : "memory");
#else
  cp_async16(__cvta_shared_to_generic(smem), gmem, valid);
#endif
}

// Closes this thread's copies issued since the last commit into one group.
// Fallback: nothing to group, every copy has landed.
__device__ __forceinline__ void cp_async_commit() {
#if FA_PTX_CP_ASYNC
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most N of this thread's committed groups are still in flight (N = 0: all landed).
// Other threads' copies need a __syncthreads after it (in the fallback too: it is what makes the
// other threads' stores visible).
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if FA_PTX_CP_ASYNC
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

}  // namespace fa::ptx
