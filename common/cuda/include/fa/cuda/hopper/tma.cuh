// tma.cuh — the tensor memory accelerator (TMA): one thread asks the copy engine for a whole tile
// of a tensor in global memory, the engine writes it into shared memory in the 128-byte swizzle
// (stage 07's SwizzledTile layout, the one wgmma reads) and, as the bytes land, counts them off an
// mbarrier that the consumers wait on. No thread computes an address per element, no registers pass
// the data, rows past the tensor's end arrive as zeros. Taught in stage 09 (docs/09_hopper.md).
//
// The pieces, once each:
//   CUtensorMap      a 128-byte descriptor of the tensor (base, sizes, strides, the box shape, the
//                    swizzle), built on the host (make_tile_map) and passed to the kernel as a
//                    `const __grid_constant__` parameter, so that it stays in parameter space where
//                    the TMA unit can read it
//   cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
//                    one box: from coordinates (column, row, head) into shared memory; completes
//                    on an mbarrier by byte count (CCCL: cuda::ptx::cp_async_bulk_tensor)
//   mbarrier         a 64-bit shared-memory barrier with a phase bit: init(count) once;
//                    arrive.expect_tx(bytes) by the thread that issues the copies (one arrival plus
//                    the bytes to wait for); try_wait.parity(phase) by every consumer, which returns
//                    true once the phase with that parity has completed (CCCL: cuda::ptx::mbarrier_*)
//
// Host side: the driver's cuTensorMapEncodeTiled, reached through cudaGetDriverEntryPointByVersion
// so that the course needs no link to libcuda.
#pragma once

#include <cuda.h>
#include <cuda/ptx>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace fa::hopper {

// The columns of one box: 64 16-bit elements, 128 bytes, the widest box the 128-byte swizzle takes.
// A tile of D columns is D / 64 boxes, one per column block of the SwizzledTile.
constexpr int kBoxColumns = 64;
// The same 128 bytes of float32: 32 columns (make_float_tile_map).
constexpr int kFloatBoxColumns = 32;

// The driver's cuTensorMapEncodeTiled, looked up once per caller.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess || fn == nullptr)
    throw std::runtime_error("TMA: the driver has no cuTensorMapEncodeTiled");
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
}

// A map of a contiguous [heads][rows][cols] tensor of `type` (element_bytes each), read or written
// in boxes of box_rows × box_cols in the 128-byte swizzle (box_cols × element_bytes = 128). `what`
// names the element type in the error.
inline CUtensorMap encode_tile_map(CUtensorMapDataType type, const void* base, std::size_t element_bytes,
                                   std::int64_t heads, std::int64_t rows, std::int64_t cols, int box_cols,
                                   int box_rows, const char* what) {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  CUtensorMap map{};
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows),
                              static_cast<cuuint64_t>(heads)};
  // Strides in bytes of dimensions 1 and 2 (dimension 0 is contiguous).
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(cols) * element_bytes,
                                 static_cast<cuuint64_t>(rows * cols) * element_bytes};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows), 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r = encode(&map, type, 3, const_cast<void*>(base), dims, strides, box, element_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("TMA: cuTensorMapEncodeTiled failed (" + std::to_string(static_cast<int>(r)) +
                             ") for a " + what + " [" + std::to_string(heads) + "][" + std::to_string(rows) + "][" +
                             std::to_string(cols) + "] tensor, boxes of " + std::to_string(box_rows) + " rows");
  return map;
}

// A map of a [heads][rows][cols] tensor of 16-bit T (contiguous, cols a multiple of 64), read in
// boxes of box_rows × 64 in the 128-byte swizzle; rows past `rows` read as zeros.
template <class T>
CUtensorMap make_tile_map(const T* base, std::int64_t heads, std::int64_t rows, std::int64_t cols, int box_rows) {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>, "TMA tiles: __half or __nv_bfloat16");
  constexpr bool kHalf = std::is_same_v<T, __half>;
  return encode_tile_map(kHalf ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, base, sizeof(T),
                         heads, rows, cols, kBoxColumns, box_rows, kHalf ? "float16" : "bfloat16");
}

// A map of a [heads][rows][cols] float32 tensor (contiguous, cols a multiple of 32) in boxes of
// box_rows × 32 floats (128 bytes) in the 128-byte swizzle: what the TMA adds into (a reduce-add
// from shared memory; stage 10's dQ). Rows past `rows` are left alone.
inline CUtensorMap make_float_tile_map(const float* base, std::int64_t heads, std::int64_t rows, std::int64_t cols,
                                       int box_rows) {
  return encode_tile_map(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, base, sizeof(float), heads, rows, cols, kFloatBoxColumns,
                         box_rows, "float32");
}

// mbarrier: init with `count` arrivals per phase, by one thread, then fenced and a block barrier
// before anyone else uses it.
__device__ __forceinline__ void barrier_init(std::uint64_t* bar, std::uint32_t count) {
  cuda::ptx::mbarrier_init(bar, count);
}
// The issuing thread: expect `bytes` more on this phase, and arrive once.
__device__ __forceinline__ void barrier_expect_bytes(std::uint64_t* bar, std::uint32_t bytes) {
  cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta, cuda::ptx::space_shared, bar,
                                       bytes);
}
// A consumer done with a buffer: one arrival (the barrier's count says how many complete a phase).
__device__ __forceinline__ void barrier_arrive(std::uint64_t* bar) { (void)cuda::ptx::mbarrier_arrive(bar); }
// Every consumer: spin until the phase of parity `phase` (0, 1, 0, ...) has completed. On a barrier
// that has not completed any phase yet, parity 1 counts as completed (the phase "before" phase 0):
// a producer waiting for an empty buffer starts with parity 1 and passes at once.
__device__ __forceinline__ void barrier_wait(std::uint64_t* bar, std::uint32_t phase) {
  while (!cuda::ptx::mbarrier_try_wait_parity(bar, phase)) {
  }
}

// One tile of ROWS rows × D columns, from row `row0` of head `head`, into a SwizzledTile<ROWS, D>
// at `tile` (1024-byte aligned): D / 64 boxes, completing on `bar`. One thread calls it, after
// barrier_expect_bytes(bar, tile_bytes<T, ROWS, D>()) (or with it: the order does not matter within
// a phase).
template <class T, int ROWS, int D>
__device__ __forceinline__ void load_tile_tma(T* tile, const CUtensorMap* map, int row0, int head, std::uint64_t* bar) {
#pragma unroll
  for (int b = 0; b < D / kBoxColumns; ++b) {
    const std::int32_t coords[3] = {b * kBoxColumns, row0, head};
    cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global, tile + b * ROWS * kBoxColumns,
                                    map, coords, bar);
  }
}
template <class T, int ROWS, int D>
__host__ __device__ constexpr std::uint32_t tile_bytes() {
  return static_cast<std::uint32_t>(ROWS * D * sizeof(T));  // out-of-range rows count too: zeros are written
}

}  // namespace fa::hopper
