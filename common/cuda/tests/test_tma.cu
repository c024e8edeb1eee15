// The TMA helpers (fa/cuda/hopper/tma.cuh, taught in stage 09): a tile brought by the tensor
// memory accelerator lands in stage 07's SwizzledTile layout (the 128-byte swizzle that wgmma
// reads), rows past the tensor's end as zeros, completing on an mbarrier whose phase flips from one
// tile to the next. Every element of the shared tile is checked against where SwizzledTile puts it:
// D = 64 and 128, tiles of 64 and 128 rows, a head's first, middle and tail tile, fp16 and bf16 (the
// same bytes). The output is poisoned first. Needs compute capability 9.0 exactly (exit 77 elsewhere).
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "fa/cuda/tc/tile_ops.cuh"
#include "fa/cuda/hopper/tma.cuh"
#include "fa/cuda/check.cuh"
#include "fa/cuda/device_buffer.cuh"
#include "sm90a_only.cuh"

namespace {

namespace hp = fa::hopper;  // the wrappers under test (common/cuda/include/fa/cuda/hopper/)

// Two tiles in turn into the same shared tile (phases 0 and 1 of one mbarrier), each copied out raw.
template <class T, int ROWS, int D>
__global__ void two_tiles_kernel(const __grid_constant__ CUtensorMap map, int head, int row_a, int row_b,
                                 std::uint16_t* out) {
  using Tile = fa::tc::SwizzledTile<ROWS, D>;
  extern __shared__ __align__(1024) unsigned char smem[];
  T* tile = reinterpret_cast<T*>(smem);
  __shared__ std::uint64_t bar;
  if (threadIdx.x == 0) hp::barrier_init(&bar, 1);
  __syncthreads();
  const int rows[2] = {row_a, row_b};
  for (int phase = 0; phase < 2; ++phase) {
    if (threadIdx.x == 0) {
      hp::barrier_expect_bytes(&bar, hp::tile_bytes<T, ROWS, D>());
      hp::load_tile_tma<T, ROWS, D>(tile, &map, rows[phase], head, &bar);
    }
    hp::barrier_wait(&bar, static_cast<std::uint32_t>(phase));
    const auto* raw = reinterpret_cast<const std::uint16_t*>(tile);
    for (int i = threadIdx.x; i < Tile::kElements; i += blockDim.x) out[phase * Tile::kElements + i] = raw[i];
    __syncthreads();  // every thread has read the tile before the next copy overwrites it
  }
}

// SwizzledTile<ROWS, D>::offset on the host: the layout the TMA must have produced.
int swizzled_offset(int rows, int r, int c) { return (c / 64) * (rows * 64) + r * 64 + (((c / 8) % 8) ^ (r % 8)) * 8 + c % 8; }

template <class T, int ROWS, int D>
void check_tiles(int seq, int head, int row_a, int row_b) {
  constexpr int heads = 3;
  // Every element a distinct 16-bit pattern (its index), never 0 (zero means "past the end").
  std::vector<std::uint16_t> host(static_cast<std::size_t>(heads) * seq * D);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<std::uint16_t>(1 + i % 65000);
  fa::MemoryMeter meter;
  fa::DeviceBuffer<T> x(meter, host.size());
  FA_CUDA_CHECK(cudaMemcpy(x.data(), host.data(), host.size() * 2, cudaMemcpyHostToDevice));
  constexpr int kElements = ROWS * D;
  fa::DeviceBuffer<std::uint16_t> out(meter, 2 * kElements);
  out.poison();
  const CUtensorMap map = hp::make_tile_map<T>(x.data(), heads, seq, D, ROWS);
  constexpr int kSmem = kElements * 2;
  FA_CUDA_CHECK(cudaFuncSetAttribute(two_tiles_kernel<T, ROWS, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  two_tiles_kernel<T, ROWS, D><<<1, 128, kSmem>>>(map, head, row_a, row_b, out.data());
  FA_CUDA_CHECK_LAUNCH();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<std::uint16_t> got(2 * kElements);
  out.download(got.data(), got.size());
  int bad = 0;
  const int row0[2] = {row_a, row_b};
  for (int phase = 0; phase < 2; ++phase)
    for (int r = 0; r < ROWS; ++r)
      for (int c = 0; c < D; ++c) {
        const int row = row0[phase] + r;
        const std::uint16_t want = row < seq ? host[(static_cast<std::size_t>(head) * seq + row) * D + c] : 0;
        if (got[phase * kElements + swizzled_offset(ROWS, r, c)] != want) ++bad;
      }
  INFO("D = " << D << ", tiles of " << ROWS << " rows at rows " << row_a << " and " << row_b << " of head " << head
              << " (" << seq << " rows): " << bad << " of " << 2 * kElements << " elements not where SwizzledTile puts them");
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("TMA tiles land in the 128-byte swizzle, zeros past the end, two phases of one mbarrier") {
  fa::testing::exit_skipped_unless_sm90a();
  check_tiles<__nv_bfloat16, 64, 64>(300, 1, 0, 256);    // a head's first tile, then its tail (44 rows)
  check_tiles<__nv_bfloat16, 64, 128>(77, 2, 64, 0);     // the tail first (13 rows), then the first
  check_tiles<__half, 128, 128>(1000, 0, 128, 896);      // a middle tile, then the tail (104 rows)
  check_tiles<__half, 128, 64>(1, 1, 0, 0);              // one row
}
