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
#pragma once

#include <cuda_runtime.h>

namespace fa::ptx {

// Copies 16 bytes from `gmem` to `smem` (both 16-byte aligned). `valid` = false zero-fills the
// destination instead (src-size 0: nothing is read, `gmem` need only be a valid address), which is
// how rows past the end of a tensor become zeros. .cg: through L2 only, bypassing L1 (allowed for
// 16-byte copies): the tile lives in shared memory, a copy in L1 would not be read again.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0)
               : "memory");
}

// Closes this thread's copies issued since the last commit into one group.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most N of this thread's committed groups are still in flight (N = 0: all landed).
// Other threads' copies need a __syncthreads after it.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace fa::ptx
