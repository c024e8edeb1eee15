// Exercise 09 — the wgmma matrix descriptor of a 128-byte swizzled tile: the 64-bit name by which
// Hopper's tensor cores read an operand straight from shared memory, and how it moves through the
// 16-wide k-steps of a product.
//
// This is stage 09's smem_descriptor, k_major_step and mn_major_step (steps/09_hopper/wgmma.cuh)
// with three holes between `// >>> ex09:TAG` and `// <<< ex09:TAG`: replace the device_todo(...)
// line (and its placeholder return) with your code and leave the markers (the course check compares
// what is between them with the stage). Read chapter 09's "The instructions, once" first. The tiles
// are stage 07's SwizzledTile: rows of 64 16-bit elements (128 bytes), 16-byte chunk c of row r
// stored at chunk c XOR (r mod 8), tiles wider than 64 as blocks of 64 columns, one after another
// (a block of `rows` rows is rows·128 bytes).
//
//   ex09:descriptor     the 64 bits: start address / 16 in bits 0-13, leading byte offset / 16 in
//                       bits 16-29, stride byte offset / 16 in bits 32-45, and the swizzle mode
//                       in bits 62-63 (1: 128 bytes). Each field keeps its low 14 bits.
//   ex09:k_major_step   the descriptor of k-step `step` (16 elements) of a K-major tile (k along
//                       the stored rows: Q, K): where does the step start? Stride offset 1024 (8
//                       rows of 128 bytes); the leading offset is unused (give 16).
//   ex09:mn_major_step  the same for an MN-major tile (n along the stored rows, k down them: V):
//                       the step starts 16 rows further; the leading offset is the distance from
//                       one block of 64 columns to the next; stride offset 1024.
//
// Device code cannot throw, so a hole calls device_todo(hole): it records the hole in a device
// flag. Before each product a one-thread kernel calls your functions, and the launcher throws
// fa::TodoNotDone naming the first hole reached, so no wgmma ever reads through a placeholder.
//
// Check your work (needs a GPU of compute capability 9.0, an H100 or H200; without one the checks
// report "skipped"):
//   cmake --build build --target check_ex09
// The chapter is docs/09_hopper.md; the answer is in solutions/09_hopper/.
// Outside the holes this file is the stage's three functions in namespace fa::ex09, the device_todo
// machinery, and a test kernel with its launcher: one warpgroup stores A and B into swizzled tiles,
// issues wgmma (the stage's instructions, with your descriptors) over the k-steps, and writes D.
//
// What you should see when it passes (on a GPU): six `ok` lines, then `6 of 6 checks pass.`
// Without a GPU the checks report skipped (exit 77): that is not a pass.
// Hints, one at a time:
//   1. Bits: a field f at bit b is static_cast<std::uint64_t>(f) << b; the "/ 16" is >> 4.
//   2. K-major: step k is 32·(k mod 4) bytes into the row (the hardware applies the XOR), in column
//      block k / 4, which starts rows·128 bytes after the previous one.
//   3. MN-major: 16 rows of 128 bytes per step: tile + 2048·step; leading offset rows·128.
// Common mistakes: forgetting that addresses are bytes while the layout counts elements (sizeof(T));
// the swizzle mode in bit 62 as 2 (that is 64 bytes) or in bits 61-63; the MN-major step moving
// 32 bytes along the row (that is K-major's); a leading offset of 128 (one row) for MN-major.
#include "descriptor_exercise.cuh"

#include <cuda/ptx>

#include <climits>
#include <cstdint>
#include <stdexcept>

#include "fa/cuda/tc/tile_ops.cuh"
#include "fa/cuda/hopper/wgmma.cuh"
#include "fa/cuda/check.cuh"
#include "fa/cuda/device_buffer.cuh"
#include "fa/cuda/ptx/ldmatrix.cuh"
#include "fa/exercise.hpp"

namespace fa::ex09 {

namespace {

// ---- FA_TODO for device code --------------------------------------------------------------------
enum Hole : int { kDescriptor = 0, kKMajorStep = 1, kMnMajorStep = 2, kNoHole = INT_MAX };
const char* const kHoleMessages[] = {
    "TODO(ex09:descriptor) is not done yet: (address & 0x3FFFF) >> 4 | ((leading >> 4) & 0x3FFF) << 16 | "
    "((stride >> 4) & 0x3FFF) << 32 | 1 << 62",
    "TODO(ex09:k_major_step) is not done yet: the descriptor at tile + bytes of (step mod 4)·16 elements "
    "+ (step / 4) column blocks of rows·64 elements; leading 16, stride 1024",
    "TODO(ex09:mn_major_step) is not done yet: the descriptor at tile + bytes of 16·step rows of 64 "
    "elements; leading = bytes of a column block (rows·64 elements), stride 1024",
};
__device__ int g_hole_reached;  // the lowest hole a thread reached; kNoHole: none
[[maybe_unused]] __device__ void device_todo(Hole hole) { atomicMin(&g_hole_reached, static_cast<int>(hole)); }

// ---- stage 09's functions (steps/09_hopper/wgmma.cuh) -------------------------------------------

// The matrix descriptor of a tile in the 128-byte swizzle at shared address `smem_address`.
__device__ __forceinline__ std::uint64_t smem_descriptor(std::uint32_t smem_address, std::uint32_t leading_bytes,
                                                         std::uint32_t stride_bytes) {
  // >>> ex09:descriptor
  return static_cast<std::uint64_t>((smem_address & 0x3FFFF) >> 4) |
         static_cast<std::uint64_t>((leading_bytes >> 4) & 0x3FFF) << 16 |
         static_cast<std::uint64_t>((stride_bytes >> 4) & 0x3FFF) << 32 | std::uint64_t{1} << 62;
  // <<< ex09:descriptor
}

// The descriptor of k-step `step` of a K-major tile of `rows` rows at `tile` (a shared address).
template <class T>
__device__ __forceinline__ std::uint64_t k_major_step(std::uint32_t tile, int step, int rows) {
  // >>> ex09:k_major_step
  return smem_descriptor(tile + sizeof(T) * ((step % 4) * 16 + (step / 4) * rows * 64), 16, 1024);
  // <<< ex09:k_major_step
}

// The descriptor of k-step `step` of an MN-major tile of `rows` k-rows at `tile`.
template <class T>
__device__ __forceinline__ std::uint64_t mn_major_step(std::uint32_t tile, int step, int rows) {
  // >>> ex09:mn_major_step
  return smem_descriptor(tile + sizeof(T) * (step * 16 * 64), sizeof(T) * rows * 64, 1024);
  // <<< ex09:mn_major_step
}

// ---- the test kernel: nothing to write below --------------------------------------------------

using T = __nv_bfloat16;
namespace s9 = fa::hopper;  // the wgmma wrappers (common/cuda/include/fa/cuda/hopper/wgmma.cuh)  // the instructions (wgmma_ss, wgmma_rs, fence, commit, wait)

// One warpgroup: A (64 × K) and B into swizzled tiles by plain stores, then D = A·B over K/16
// k-steps with your descriptors. kRs: A from registers (ldmatrix); kTransB: B MN-major.
template <int N, int K, bool kRs, int kTransB>
__global__ void __launch_bounds__(128) product_kernel(const T* a, const T* b, float* d) {
  using ATile = tc::SwizzledTile<64, K>;
  using BTile = std::conditional_t<kTransB == 1, tc::SwizzledTile<K, N>, tc::SwizzledTile<N, K>>;
  __shared__ __align__(1024) T a_s[ATile::kElements];
  __shared__ __align__(1024) T b_s[BTile::kElements];
  constexpr int kBRows = kTransB == 1 ? K : N, kBCols = kTransB == 1 ? N : K;
  for (int c = threadIdx.x; c < 64 * K / 8; c += 128) {
    const int r = c / (K / 8), col = c % (K / 8) * 8;
    *reinterpret_cast<uint4*>(a_s + ATile::offset(r, col)) = *reinterpret_cast<const uint4*>(a + r * K + col);
  }
  for (int c = threadIdx.x; c < kBRows * kBCols / 8; c += 128) {
    const int r = c / (kBCols / 8), col = c % (kBCols / 8) * 8;
    *reinterpret_cast<uint4*>(b_s + BTile::offset(r, col)) = *reinterpret_cast<const uint4*>(b + r * kBCols + col);
  }
  cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);  // plain stores, visible to the tensor cores
  __syncthreads();

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const auto a_addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(a_s));
  const auto b_addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(b_s));
  constexpr int kSteps = K / 16;
  std::uint32_t a_frag[kSteps][4];
  if constexpr (kRs) {
    const std::uint32_t base = a_addr + sizeof(T) * ((lane % 16) * 64 + ((lane / 16) ^ (lane % 8)) * 8);
#pragma unroll
    for (int s = 0; s < kSteps; ++s) ptx::ldmatrix_x4(a_frag[s], tc::swizzled_at<T>(base, s, warp, 64));
  }
  // Your descriptors, every k-step (probe_kernel has made sure that no hole is left).
  std::uint64_t desc_a[kSteps], desc_b[kSteps];
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    desc_a[s] = k_major_step<T>(a_addr, s, 64);
    desc_b[s] = kTransB == 1 ? mn_major_step<T>(b_addr, s, K) : k_major_step<T>(b_addr, s, N);
  }

  float acc[N / 8][4];
#pragma unroll
  for (int j = 0; j < N / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
  s9::wgmma_fence();
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    if constexpr (kRs) s9::wgmma_rs<T, kTransB>(acc, a_frag[s], desc_b[s], s > 0);
    else s9::wgmma_ss<T, kTransB>(acc, desc_a[s], desc_b[s], s > 0);
  }
  s9::wgmma_commit();
  s9::wgmma_wait<0>();
  s9::fence_accumulators(acc);
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
    const int row = 16 * warp + g, col = 8 * j + 2 * t;
    d[row * N + col] = acc[j][0];
    d[row * N + col + 1] = acc[j][1];
    d[(row + 8) * N + col] = acc[j][2];
    d[(row + 8) * N + col + 1] = acc[j][3];
  }
}

// One thread calls the three functions once, so that a hole still a TODO is found before any
// wgmma is issued: the tensor cores are never asked to read through a placeholder descriptor.
__global__ void probe_kernel(std::uint64_t* out) {
  out[0] = k_major_step<T>(0, 1, 64);
  out[1] = mn_major_step<T>(0, 1, 64);
}

template <int N, int K>
void launch(const ProductCase& c, const T* a, const T* b, float* d) {
  if (c.a_in_registers && c.b_mn_major) product_kernel<N, K, true, 1><<<1, 128>>>(a, b, d);
  else if (c.a_in_registers) product_kernel<N, K, true, 0><<<1, 128>>>(a, b, d);
  else if (c.b_mn_major) product_kernel<N, K, false, 1><<<1, 128>>>(a, b, d);
  else product_kernel<N, K, false, 0><<<1, 128>>>(a, b, d);
}

}  // namespace

std::vector<float> run_product(const ProductCase& c) {
  if ((c.n != 64 && c.n != 128) || (c.k != 64 && c.k != 128) || c.a.size() != static_cast<std::size_t>(64 * c.k) ||
      c.b.size() != static_cast<std::size_t>(c.k * c.n))
    throw std::invalid_argument("ex09 run_product: n and k 64 or 128, a of [64][k], b of k·n");
  std::vector<T> a16(c.a.size()), b16(c.b.size());
  for (std::size_t i = 0; i < c.a.size(); ++i) a16[i] = __float2bfloat16(c.a[i]);
  for (std::size_t i = 0; i < c.b.size(); ++i) b16[i] = __float2bfloat16(c.b[i]);
  MemoryMeter meter;
  DeviceBuffer<T> a(meter, a16.size()), b(meter, b16.size());
  DeviceBuffer<float> d(meter, static_cast<std::size_t>(64 * c.n));
  a.upload(a16.data(), a16.size());
  b.upload(b16.data(), b16.size());
  d.poison();  // NaN: what the kernel does not write fails
  DeviceBuffer<std::uint64_t> probe(meter, 2);
  const int none = kNoHole;
  FA_CUDA_CHECK(cudaMemcpyToSymbol(g_hole_reached, &none, sizeof none));
  probe_kernel<<<1, 1>>>(probe.data());
  FA_CUDA_CHECK_LAUNCH();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  int reached = kNoHole;
  FA_CUDA_CHECK(cudaMemcpyFromSymbol(&reached, g_hole_reached, sizeof reached));
  if (reached != kNoHole) throw TodoNotDone(kHoleMessages[reached]);
  if (c.n == 64 && c.k == 64) launch<64, 64>(c, a.data(), b.data(), d.data());
  else if (c.n == 64) launch<64, 128>(c, a.data(), b.data(), d.data());
  else if (c.k == 64) launch<128, 64>(c, a.data(), b.data(), d.data());
  else launch<128, 128>(c, a.data(), b.data(), d.data());
  FA_CUDA_CHECK_LAUNCH();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> out(static_cast<std::size_t>(64 * c.n));
  d.download(out.data(), out.size());
  return out;
}

}  // namespace fa::ex09
