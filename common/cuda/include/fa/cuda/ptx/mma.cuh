// mma.cuh — mma.sync.m16n8k16: one warp multiplies a 16 × 16 tile by a 16 × 8 tile on the tensor
// cores (sm_80+), 16-bit inputs (float16 or bfloat16), float32 accumulators. Taught in stage 07
// (steps/07_tensor_cores/, docs/07_tensor_cores.md draws the fragments).
//
// The 32 threads of the warp each hold a fixed piece of every operand, its "fragment". With
// g = lane / 4 (the group, 0..7) and t = lane % 4 (the thread in the group, 0..3):
//
//   A  16 × 16, row-major, 4 registers of two 16-bit values each:
//        a[0] = A[g    ][2t, 2t+1]     a[2] = A[g    ][2t+8, 2t+9]
//        a[1] = A[g + 8][2t, 2t+1]     a[3] = A[g + 8][2t+8, 2t+9]
//   B  16 × 8 (k × n), 2 registers:
//        b[0] = B[2t, 2t+1][g]         b[1] = B[2t+8, 2t+9][g]        (two k-rows of column g)
//   C, D  16 × 8, float32, 4 registers:
//        c[0], c[1] = C[g][2t, 2t+1]   c[2], c[3] = C[g + 8][2t, 2t+1]
//
// Two facts that the attention kernels build on: a thread's accumulator holds two neighbouring
// columns of two rows (g and g + 8), so a row's max or sum is shared by the 4 threads of a group
// (two shuffles); and the C layout of two neighbouring 16 × 8 tiles, converted to 16 bits, is
// exactly the A layout of one 16 × 16 tile: P = softmax(S) goes from accumulator to operand
// without leaving the registers.
//
// Inline PTX: CUDA C++'s nvcuda::wmma hides the fragment layout (which the kernels need for the
// softmax), and CCCL's cuda::ptx does not wrap mma.sync.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace fa::ptx {

// D = A·B + D for one m16n8k16 tile; T is __half or __nv_bfloat16.
template <class T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>, "mma_m16n8k16: __half or __nv_bfloat16");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#else
  (void)d, (void)a, (void)b;
  __trap();  // the stage is built for sm_80 and newer only
#endif
}

// Two floats rounded to T (nearest even) and packed into one register, `lo` in the low 16 bits:
// the element order of every fragment register above.
template <class T>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&h);
  }
}

// 2^x by the special-function unit (one MUFU.EX2; relative error about 2^-22, subnormals flushed
// to zero, 2^-inf = 0). exp2f compiles to the same instruction plus the handling of subnormals.
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace fa::ptx
