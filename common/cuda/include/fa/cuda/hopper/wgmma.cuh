// wgmma.cuh — Hopper's warpgroup matrix multiply (sm_90a): four warps (a "warpgroup", 128 threads)
// multiply a 64 × 16 tile A by a 16 × N tile B into a 64 × N float32 accumulator, with B (and,
// in the _ss form, A) read by the tensor cores straight from shared memory: no ldmatrix, no
// operand registers. Taught in stage 09 (docs/09_hopper.md); the instructions, once each:
//
//   wgmma.fence.sync.aligned         before the first wgmma that reads registers written by other
//                                     instructions (the accumulators, A in the _rs form)
//   wgmma.mma_async.sync.aligned     issue one product; it runs asynchronously, in order with the
//     .m64nNk16.f32.bf16.bf16        warpgroup's other wgmmas: until it completes, its accumulator
//                                     and A registers must not be read or written
//   wgmma.commit_group.sync.aligned  close the group of products issued since the last commit
//   wgmma.wait_group.sync.aligned N  wait until at most N committed groups are still running
//
// Shared-memory operands are named by a 64-bit "matrix descriptor" (below). Writes to shared memory
// by ordinary stores must be fenced (fence.proxy.async.shared::cta, CCCL's
// cuda::ptx::fence_proxy_async) before a wgmma reads them: the tensor cores read through the
// "async proxy", which does not see generic-proxy stores without it. TMA copies land in the async
// proxy already.
//
// The accumulator layout is mma.sync's (fa/cuda/ptx/mma.cuh), stacked: warp w of the warpgroup owns
// rows 16w .. 16w + 15, and for each 8-column block j its thread holds d[j][0..3] =
// C[16w + g][8j + 2t, +1], C[16w + g + 8][8j + 2t, +1] (g = lane / 4, t = lane % 4): the
// float[N / 8][4] of stage 07's accumulators, so that its softmax and epilogue apply unchanged. The _rs form's A
// registers are mma.sync's A fragment of the warp's 16 rows: the C → A identity of stage 07 holds.
//
// Inline PTX: CCCL's cuda::ptx (CUDA 13.0) wraps TMA, mbarrier and the proxy fences, not wgmma.
// The operand lists are long because every accumulator is a register operand of the instruction.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include <fa/cuda/hopper/smem_descriptor.cuh>
#include <fa/cuda/ptx/mma.cuh>

// wgmma needs the architecture-specific sm_90a target (compute_90a): plain sm_90 lacks it.
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FA_HAVE_WGMMA 1
#else
#define FA_HAVE_WGMMA 0
#endif

namespace fa::hopper {

// The matrix descriptors of shared-memory operands (smem_descriptor, k_major_step, mn_major_step):
// fa/cuda/hopper/smem_descriptor.cuh, included with angle brackets because it is exercise ex09's
// hole (the exercise puts its own copy first on the include path).
__device__ __forceinline__ void wgmma_fence() {
#if FA_HAVE_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if FA_HAVE_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if FA_HAVE_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// An accumulator that a wgmma is writing must not be touched by the compiler's code either: this
// tells it the registers may change here (after a wait, before reading them).
template <int NT>
__device__ __forceinline__ void fence_accumulators(float (&d)[NT][4]) {
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[n][e])::"memory");
}

// A wgmma's A registers (the _rs form) must keep their values until the wgmma completes; to the
// compiler the asm statement consumed them at issue. Naming them after the wait keeps them allocated
// (and unchanged) until then.
template <int KS>
__device__ __forceinline__ void fence_operands(std::uint32_t (&a)[KS][4]) {
#pragma unroll
  for (int k = 0; k < KS; ++k)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[k][e])::"memory");
}

// An accumulator rounded to 16 bits as the A operand of _rs wgmmas: the fragments of an m64nN
// accumulator (float[N / 8][4]), packed in pairs, are the A fragments of N / 16 k-steps (the C → A
// identity above: two 8-column blocks make one 16-wide k-step). P for O += P·V in the forward; Pᵀ
// and dSᵀ for dV and dK in the backward.
template <class T, int NT>
__device__ __forceinline__ void pack_accumulator_as_a(std::uint32_t (&a)[NT / 2][4], const float (&d)[NT][4]) {
#pragma unroll
  for (int ks = 0; ks < NT / 2; ++ks) {
    a[ks][0] = ptx::pack2<T>(d[2 * ks][0], d[2 * ks][1]);
    a[ks][1] = ptx::pack2<T>(d[2 * ks][2], d[2 * ks][3]);
    a[ks][2] = ptx::pack2<T>(d[2 * ks + 1][0], d[2 * ks + 1][1]);
    a[ks][3] = ptx::pack2<T>(d[2 * ks + 1][2], d[2 * ks + 1][3]);
  }
}

template <class T>
__device__ __forceinline__ void check_operand_type() {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>, "wgmma: __half or __nv_bfloat16");
}
// Built for a GPU without wgmma (a stage 09 kernel compiled for plain sm_90 or older): never run,
// the stage exits 77 there; trap rather than return a wrong product.
template <int NT>
__device__ __forceinline__ void no_wgmma(float (&)[NT][4]) {
  __trap();
}

// The accumulator operands: every float of d[N / 8][4] is a register operand of the instruction,
// %0 .. %(N / 2 − 1) in the instruction's text, "+f" (read and written) in the operand list.
#define FA_WGMMA_OUT4(j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define FA_WGMMA_D_N64 \
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
#define FA_WGMMA_D_N80 \
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
      "%32,%33,%34,%35,%36,%37,%38,%39"
#define FA_WGMMA_D_N128 \
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
#define FA_WGMMA_D_N256 \
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63," \
      "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79," \
      "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95," \
      "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111," \
      "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
#define FA_WGMMA_OUT_N64 \
    FA_WGMMA_OUT4(0), FA_WGMMA_OUT4(1), FA_WGMMA_OUT4(2), FA_WGMMA_OUT4(3), \
    FA_WGMMA_OUT4(4), FA_WGMMA_OUT4(5), FA_WGMMA_OUT4(6), FA_WGMMA_OUT4(7)
#define FA_WGMMA_OUT_N80 \
    FA_WGMMA_OUT4(0), FA_WGMMA_OUT4(1), FA_WGMMA_OUT4(2), FA_WGMMA_OUT4(3), \
    FA_WGMMA_OUT4(4), FA_WGMMA_OUT4(5), FA_WGMMA_OUT4(6), FA_WGMMA_OUT4(7), \
    FA_WGMMA_OUT4(8), FA_WGMMA_OUT4(9)
#define FA_WGMMA_OUT_N128 \
    FA_WGMMA_OUT4(0), FA_WGMMA_OUT4(1), FA_WGMMA_OUT4(2), FA_WGMMA_OUT4(3), \
    FA_WGMMA_OUT4(4), FA_WGMMA_OUT4(5), FA_WGMMA_OUT4(6), FA_WGMMA_OUT4(7), \
    FA_WGMMA_OUT4(8), FA_WGMMA_OUT4(9), FA_WGMMA_OUT4(10), FA_WGMMA_OUT4(11), \
    FA_WGMMA_OUT4(12), FA_WGMMA_OUT4(13), FA_WGMMA_OUT4(14), FA_WGMMA_OUT4(15)
#define FA_WGMMA_OUT_N256 \
    FA_WGMMA_OUT4(0), FA_WGMMA_OUT4(1), FA_WGMMA_OUT4(2), FA_WGMMA_OUT4(3), \
    FA_WGMMA_OUT4(4), FA_WGMMA_OUT4(5), FA_WGMMA_OUT4(6), FA_WGMMA_OUT4(7), \
    FA_WGMMA_OUT4(8), FA_WGMMA_OUT4(9), FA_WGMMA_OUT4(10), FA_WGMMA_OUT4(11), \
    FA_WGMMA_OUT4(12), FA_WGMMA_OUT4(13), FA_WGMMA_OUT4(14), FA_WGMMA_OUT4(15), \
    FA_WGMMA_OUT4(16), FA_WGMMA_OUT4(17), FA_WGMMA_OUT4(18), FA_WGMMA_OUT4(19), \
    FA_WGMMA_OUT4(20), FA_WGMMA_OUT4(21), FA_WGMMA_OUT4(22), FA_WGMMA_OUT4(23), \
    FA_WGMMA_OUT4(24), FA_WGMMA_OUT4(25), FA_WGMMA_OUT4(26), FA_WGMMA_OUT4(27), \
    FA_WGMMA_OUT4(28), FA_WGMMA_OUT4(29), FA_WGMMA_OUT4(30), FA_WGMMA_OUT4(31)

// One instruction: AB is "bf16" or "f16", N 64, 80, 128 or 256; the operands after the
// accumulators are A (a descriptor, or four registers), B's descriptor, scale_d (into the
// predicate p) and the transpose flags (of A in the _ss forms, and of B).
#define FA_WGMMA_M64N64_SS(AB) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." AB "." AB " {" FA_WGMMA_D_N64 \
               "}, %32, %33, p, 1, 1, %35, %36;\n}\n" \
               : FA_WGMMA_OUT_N64 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA), "n"(kTransB))
#define FA_WGMMA_M64N64_RS(AB) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." AB "." AB " {" FA_WGMMA_D_N64 \
               "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n" \
               : FA_WGMMA_OUT_N64 \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(kTransB))
#define FA_WGMMA_M64N80_SS(AB) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %42, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n80k16.f32." AB "." AB " {" FA_WGMMA_D_N80 \
               "}, %40, %41, p, 1, 1, %43, %44;\n}\n" \
               : FA_WGMMA_OUT_N80 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA), "n"(kTransB))
#define FA_WGMMA_M64N128_SS(AB) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." AB "." AB " {" FA_WGMMA_D_N128 \
               "}, %64, %65, p, 1, 1, %67, %68;\n}\n" \
               : FA_WGMMA_OUT_N128 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA), "n"(kTransB))
#define FA_WGMMA_M64N128_RS(AB) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." AB "." AB " {" FA_WGMMA_D_N128 \
               "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n" \
               : FA_WGMMA_OUT_N128 \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(kTransB))
#define FA_WGMMA_M64N256_RS(AB) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n256k16.f32." AB "." AB " {" FA_WGMMA_D_N256 \
               "}, {%128, %129, %130, %131}, %132, p, 1, 1, %134;\n}\n" \
               : FA_WGMMA_OUT_N256 \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(kTransB))

// D (64 × N) = A·B + (scale_d ? D : 0), one k-step of 16. _ss: A from shared memory (desc_a;
// kTransA 0 for a K-major A, 1 for an MN-major one); _rs: A from registers (mma.sync's A fragment of
// the warp's 16 rows). kTransB: 0 for a K-major B, 1 for an MN-major B. scale_d = 0 ignores the
// accumulator's old value (the first k-step).
template <class T, int kTransB, int kTransA = 0>
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[8][4], std::uint64_t desc_a, std::uint64_t desc_b,
                                                   int scale_d) {
  check_operand_type<T>();
#if FA_HAVE_WGMMA
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    FA_WGMMA_M64N64_SS("bf16");
  } else {
    FA_WGMMA_M64N64_SS("f16");
  }
#else
  no_wgmma(d);
#endif
}

template <class T, int kTransB>
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[8][4], const std::uint32_t (&a)[4], std::uint64_t desc_b,
                                                   int scale_d) {
  check_operand_type<T>();
#if FA_HAVE_WGMMA
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    FA_WGMMA_M64N64_RS("bf16");
  } else {
    FA_WGMMA_M64N64_RS("f16");
  }
#else
  no_wgmma(d);
#endif
}

// N = 80: the backward's query tiles of 80 rows at D = 128 (stage 10).
template <class T, int kTransB, int kTransA = 0>
__device__ __forceinline__ void wgmma_m64n80k16_ss(float (&d)[10][4], std::uint64_t desc_a, std::uint64_t desc_b,
                                                   int scale_d) {
  check_operand_type<T>();
#if FA_HAVE_WGMMA
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    FA_WGMMA_M64N80_SS("bf16");
  } else {
    FA_WGMMA_M64N80_SS("f16");
  }
#else
  no_wgmma(d);
#endif
}

template <class T, int kTransB, int kTransA = 0>
__device__ __forceinline__ void wgmma_m64n128k16_ss(float (&d)[16][4], std::uint64_t desc_a, std::uint64_t desc_b,
                                                    int scale_d) {
  check_operand_type<T>();
#if FA_HAVE_WGMMA
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    FA_WGMMA_M64N128_SS("bf16");
  } else {
    FA_WGMMA_M64N128_SS("f16");
  }
#else
  no_wgmma(d);
#endif
}

template <class T, int kTransB>
__device__ __forceinline__ void wgmma_m64n128k16_rs(float (&d)[16][4], const std::uint32_t (&a)[4],
                                                    std::uint64_t desc_b,
                                                    int scale_d) {
  check_operand_type<T>();
#if FA_HAVE_WGMMA
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    FA_WGMMA_M64N128_RS("bf16");
  } else {
    FA_WGMMA_M64N128_RS("f16");
  }
#else
  no_wgmma(d);
#endif
}
// N = 256: O += P·V at D = 256; A from registers only.
template <class T, int kTransB>
__device__ __forceinline__ void wgmma_m64n256k16_rs(float (&d)[32][4], const std::uint32_t (&a)[4],
                                                    std::uint64_t desc_b, int scale_d) {
  check_operand_type<T>();
#if FA_HAVE_WGMMA
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    FA_WGMMA_M64N256_RS("bf16");
  } else {
    FA_WGMMA_M64N256_RS("f16");
  }
#else
  no_wgmma(d);
#endif
}
#undef FA_WGMMA_M64N64_SS
#undef FA_WGMMA_M64N64_RS
#undef FA_WGMMA_M64N80_SS
#undef FA_WGMMA_M64N128_SS
#undef FA_WGMMA_M64N128_RS
#undef FA_WGMMA_M64N256_RS
#undef FA_WGMMA_OUT4
#undef FA_WGMMA_D_N64
#undef FA_WGMMA_D_N80
#undef FA_WGMMA_D_N128
#undef FA_WGMMA_D_N256
#undef FA_WGMMA_OUT_N64
#undef FA_WGMMA_OUT_N80
#undef FA_WGMMA_OUT_N128
#undef FA_WGMMA_OUT_N256

// The product for the accumulator's width: N = 8·NT (64, 80 or 128 from shared memory; 64, 128 or
// 256 with A from registers). wgmma_ss reads a K-major A; wgmma_ss_mn_major_a an MN-major one (A's
// rows contiguous: a tile stored [k][m], read as its transpose).
template <class T, int kTransB, int NT, int kTransA = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[NT][4], std::uint64_t desc_a, std::uint64_t desc_b, int scale_d) {
  static_assert(NT == 8 || NT == 10 || NT == 16, "wgmma_ss: N = 64, 80 or 128");
  if constexpr (NT == 8) wgmma_m64n64k16_ss<T, kTransB, kTransA>(d, desc_a, desc_b, scale_d);
  else if constexpr (NT == 10) wgmma_m64n80k16_ss<T, kTransB, kTransA>(d, desc_a, desc_b, scale_d);
  else wgmma_m64n128k16_ss<T, kTransB, kTransA>(d, desc_a, desc_b, scale_d);
}
template <class T, int kTransB, int NT>
__device__ __forceinline__ void wgmma_ss_mn_major_a(float (&d)[NT][4], std::uint64_t desc_a, std::uint64_t desc_b,
                                                    int scale_d) {
  wgmma_ss<T, kTransB, NT, 1>(d, desc_a, desc_b, scale_d);
}
template <class T, int kTransB, int NT>
__device__ __forceinline__ void wgmma_rs(float (&d)[NT][4], const std::uint32_t (&a)[4], std::uint64_t desc_b,
                                         int scale_d) {
  static_assert(NT == 8 || NT == 16 || NT == 32, "wgmma_rs: N = 64, 128 or 256");
  if constexpr (NT == 8) wgmma_m64n64k16_rs<T, kTransB>(d, a, desc_b, scale_d);
  else if constexpr (NT == 16) wgmma_m64n128k16_rs<T, kTransB>(d, a, desc_b, scale_d);
  else wgmma_m64n256k16_rs<T, kTransB>(d, a, desc_b, scale_d);
}

}  // namespace fa::hopper
