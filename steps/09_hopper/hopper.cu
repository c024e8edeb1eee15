// Stage 09 — the host side: the tile shape of each rung, the tensor maps, the launch.
//
// What changed from stage 07 (steps/07_tensor_cores/tensor_cores.cu): three tensor maps (Q, K, V)
// built on the host for every launch and passed by value to the kernel; the build is for sm_90a;
// the grid is (query tiles, heads), not (heads, query tiles), so that the blocks resident together
// share a head's K/V in L2 (block_work in ladder/v1_tma_wgmma.cuh); the ladder's five rungs, each
// its own kernel in ladder/ (v1_tma_wgmma, v2_warp_specialized, v3_pingpong, v4_overlap: a grid of
// blocks; v5_persistent: one block per SM with a counter that hands out the tiles).
// Limits: D = 64, 128 and 256 (256 correct, not tuned), Hkv = Hq, B·H ≤ 65535. The overlap rung also
// takes a later stage's policies (grouped heads, packed rows: attention_forward_overlap_with).
//
// Build and run (verifies against float64 and stage 07 on the same inputs):
//   cmake -S . -B build -G Ninja && cmake --build build --target step09_hopper
//   build/steps/09_hopper/step09_hopper                   (--help for the flags)
#include "09_hopper/hopper.cuh"

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "fa/cuda/tc/launch.cuh"
#include "07_tensor_cores/tensor_cores.cuh"
#include "09_hopper/ladder/v1_tma_wgmma.cuh"
#include "09_hopper/ladder/v2_warp_specialized.cuh"
#include "09_hopper/ladder/v3_pingpong.cuh"
#include "09_hopper/ladder/v4_overlap.cuh"
#include "09_hopper/ladder/v5_persistent.cuh"

namespace fa::step09 {

namespace {

// Two warpgroups of 64 query rows (Br = 128), K/V tiles of 128 keys, two stages: at D = 128 that
// is 160 KiB of shared memory and one block per SM. Not tuned yet. D = 256 (correct, not tuned):
// K/V tiles of 64 keys in every rung, since one 256-wide tile of 128 keys is 64 KiB and Q is
// 64 KiB already; two stages make 192 KiB.
template <int D>
inline constexpr int kKeyTile = D == 256 ? 64 : 128;
template <int D>
using StageConfig = WgmmaConfig<D, 2, kKeyTile<D>>;

// The second rung: the same tiles, one producer warpgroup more (384 threads).
template <int D>
using WsStageConfig = WsConfig<D, 2, kKeyTile<D>>;

// The third and fourth: three stages, because a stage is released one turn later (its P·V is
// issued with the next tile's S): at D = 128, 224 KiB of the 227 an SM gives a block. At D = 64
// the softmax is a larger share of each tile's work than at D = 128 (the same exponentials, half
// the products), so three consumer warpgroups take turns (Br = 192, 160 registers each, keys in
// tiles of 128): while one is on the tensor cores, two can be in their softmax. One A/B run of two
// builds against two consumers with 192-key tiles: 1.12-1.15× without the mask, 1.05-1.08× causal
// at 4k and 16k (chapter 09). D = 256: two stages (three would be 256 KiB); the turns still
// alternate, each waits a little longer for its stage.
template <int D>
using PingPongStageConfig = WsConfig<D, D == 64 ? 3 : 2, kKeyTile<D>, D == 256 ? 2 : 3>;

// The persistent rung's tile counters, zeroed on the stream before each launch (4 bytes of static
// device memory each, not from the allocator). A ring of them, so that launches queued on
// different streams at the same time (up to 64) do not share one. Each device has its own copy of
// the array: its address is looked up once per device (stage 13 launches on several).
__device__ int g_tile_counters[64];

int* next_tile_counter(cudaStream_t stream) {
  static std::atomic<unsigned> launches{0};
  static std::array<std::atomic<int*>, 64> counters{};  // by device
  int device = 0;
  FA_CUDA_CHECK(cudaGetDevice(&device));
  std::atomic<int*>& on_device = counters[static_cast<std::size_t>(device) % counters.size()];
  if (on_device.load() == nullptr) {
    void* p = nullptr;
    FA_CUDA_CHECK(cudaGetSymbolAddress(&p, g_tile_counters));
    on_device.store(static_cast<int*>(p));
  }
  int* counter = on_device.load() + launches.fetch_add(1) % 64;
  FA_CUDA_CHECK(cudaMemsetAsync(counter, 0, sizeof(int), stream));
  return counter;
}

// One launch of a rung's kernel for the tile shape C (Br query rows, Bc keys, kThreads threads).
// kPersistent: min(work items, SMs) blocks that take the work items (query tiles × heads) from a
// counter; otherwise one block per item. `policies`: the ping-pong kernel's heads and rows policies
// (fa/cuda/policies/), passed to it after the arguments; none for the other kernels.
template <class T, class C, auto kernel, bool kPersistent = false, class... Policies>
void launch_rung(const char* name, const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                 DeviceContext& ctx, Policies... policies) {
  constexpr int D = C::D;
  constexpr int kSmem = C::kSmemBytes + (kPersistent ? TileQueue::kBytes : 0);
  tc::check_launch(p, in, out, std::string("stage 09 ") + name, C::kBr, kSmem);
  opt_in_shared_memory_once<kernel, kSmem>();
  // Packed ([1, H, Σ L_s, D], fa/packed.hpp; the rows policy PackedRows): the maps cover every
  // head's rows, each block finds its sequence's rows through cu_seqlens (grid z), and the grid's x
  // covers the longest sequence.
  constexpr bool packed = (std::is_same_v<Policies, policies::PackedRows> || ...);
  if (packed != p.packed()) throw UsageError(std::string("stage 09 ") + name + ": a packed batch needs the packed rows");
  const std::int64_t rows = packed ? p.total_tokens() : p.seq_q;
  const std::int64_t heads = packed ? p.heads : p.heads_total(), kv_heads = (packed ? 1 : p.batch) * p.kv_heads();
  const TileMaps maps{make_tile_map<T>(in.q.as<T>(), heads, rows, D, C::kBr),
                      make_tile_map<T>(in.k.as<T>(), kv_heads, packed ? rows : p.seq_k, D, C::kBc),
                      make_tile_map<T>(in.v.as<T>(), kv_heads, packed ? rows : p.seq_k, D, C::kBc)};
  const float scale = p.softmax_scale();
  if (rows > INT_MAX / 2) throw UsageError(std::string("stage 09 ") + name + ": Σ L_s is too large for 32-bit indices");
  const tc::KernelArgs<T> a{in.q.as<T>(), in.k.as<T>(), in.v.as<T>(), out.o.as<T>(), out.lse.as<float>(),
                            static_cast<int>(rows), static_cast<int>(packed ? rows : p.seq_k), scale,
                            scale * static_cast<float>(M_LOG2E), p.causal, p.causal};
  const auto tiles = static_cast<unsigned>((p.seq_q + C::kBr - 1) / C::kBr);
  ctx.kernel_begin(name);
  if constexpr (kPersistent) {
    const std::int64_t items = static_cast<std::int64_t>(tiles) * heads;
    // + gridDim.x per block at the end: the counter may run up to items + 2 · blocks.
    if (items > INT_MAX / 2) throw UsageError(std::string("stage 09 ") + name + ": too many query tiles × heads");
    const int sms = current_sm_count();
    // Causal, the heads' tiles go out heaviest first in groups of heads whose K and V take about
    // 16 MiB, a third of an H100's L2 (chapter 09: a fixed 8 heads lost 2 % at 16k keys and D =
    // 128, where their K and V take 64 MiB).
    const std::int64_t kv_bytes_per_head = 2 * p.seq_k * D * static_cast<std::int64_t>(sizeof(T));
    const auto head_group = static_cast<int>(std::clamp<std::int64_t>((std::int64_t{16} << 20) / kv_bytes_per_head, 1, heads));
    const TileSchedule ts{static_cast<int>(tiles), static_cast<int>(items), head_group, next_tile_counter(ctx.stream)};
    const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(items, sms));
    kernel<<<blocks, C::kThreads, kSmem, ctx.stream>>>(maps, a, ts);
  } else {
    // A head's tiles together (block_work); packed, the sequences along z.
    const dim3 grid(tiles, static_cast<unsigned>(heads), static_cast<unsigned>(packed ? p.batch : 1));
    kernel<<<grid, C::kThreads, kSmem, ctx.stream>>>(maps, a, policies...);
  }
  FA_CUDA_CHECK_LAUNCH();
  ctx.kernel_end(name);
}

enum class Rung { tma_wgmma, warp_specialized, pingpong, overlap, persistent };

template <class T, int D>
void launch_stage(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx,
                  Rung rung) {
  using PP = PingPongStageConfig<D>;
  switch (rung) {
    case Rung::tma_wgmma:
      return launch_rung<T, StageConfig<D>, flash_wgmma_kernel<T, StageConfig<D>>>("tma_wgmma", p, in, out, ctx);
    case Rung::warp_specialized:
      return launch_rung<T, WsStageConfig<D>, flash_ws_kernel<T, WsStageConfig<D>>>("warp_specialized", p, in, out,
                                                                                    ctx);
    case Rung::pingpong:
      return launch_rung<T, PP, flash_pingpong_kernel<T, PP>>("pingpong", p, in, out, ctx, policies::SameHeads{},
                                                               policies::DenseRows{});
    case Rung::overlap:
      return launch_rung<T, PP, flash_overlap_kernel<T, PP>>("overlap", p, in, out, ctx, policies::SameHeads{},
                                                              policies::DenseRows{});
    case Rung::persistent:
      return launch_rung<T, PP, flash_persistent_kernel<T, PP>, true>("persistent", p, in, out, ctx);
  }
}

// f.template operator()<T, D>() for p's dtype and head dim.
template <class F>
void for_dtype_and_dim(const Problem& p, F&& f) {
  if (p.heads_total() > 65535) throw UsageError("stage 09: B·H is at most 65535 (the TMA's head coordinate, the grid)");
  const bool half = p.dtype == DType::float16;
  auto at = [&]<int D>() { half ? f.template operator()<__half, D>() : f.template operator()<__nv_bfloat16, D>(); };
  if (p.dim == 64) at.template operator()<64>();
  else if (p.dim == 128) at.template operator()<128>();
  else at.template operator()<256>();
}

void forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx,
             Rung rung) {
  p.require(kSupports);
  for_dtype_and_dim(p, [&]<class T, int D>() { launch_stage<T, D>(p, in, out, ctx, rung); });
}

// The overlap rung with a later stage's policies: what it may pass (grouped heads, packed batches).
const Supports kPolicySupports{.dtypes = {DType::bfloat16, DType::float16},
                               .dims = {64, 128, 256},
                               .grouped_heads = true,
                               .variable_lengths = true};

template <class Rows>
void overlap_with(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx,
                  policies::GroupedHeads heads, Rows rows) {
  p.require(kPolicySupports);
  if (heads.group != p.heads / p.kv_heads())
    throw UsageError("stage 09: the grouped-heads policy's group must be Hq / Hkv = " +
                     std::to_string(p.heads / p.kv_heads()) + ", not " + std::to_string(heads.group));
  for_dtype_and_dim(p, [&]<class T, int D>() {
    using PP = PingPongStageConfig<D>;
    launch_rung<T, PP, flash_overlap_kernel<T, PP, policies::GroupedHeads, Rows>>("overlap", p, in, out, ctx, heads,
                                                                                  rows);
  });
}

}  // namespace

void attention_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx) {
  forward(p, in, out, ctx, Rung::tma_wgmma);
}

bool runs_on(int device) {
  static std::array<std::atomic<int>, 64> known{};  // 0 unknown, 1 no, 2 yes
  std::atomic<int>& k = known[static_cast<std::size_t>(device) % known.size()];
  if (k.load() == 0) {
    const DeviceInfo d = query_device(device);
    k.store(d.compute_major == 9 && d.compute_minor == 0 ? 2 : 1);
  }
  return k.load() == 2;
}

bool runs_here() {
  int device = 0;
  FA_CUDA_CHECK(cudaGetDevice(&device));
  return runs_on(device);
}

void fastest_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx) {
  if (runs_here()) attention_forward_overlap(p, in, out, ctx);
  else step07::attention_forward(p, in, out, ctx);
}

const char* fastest_forward_stage() { return runs_here() ? "09" : "07"; }

void attention_forward_warp_specialized(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                                        DeviceContext& ctx) {
  forward(p, in, out, ctx, Rung::warp_specialized);
}

void attention_forward_pingpong(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                                DeviceContext& ctx) {
  forward(p, in, out, ctx, Rung::pingpong);
}

void attention_forward_overlap(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                               DeviceContext& ctx) {
  forward(p, in, out, ctx, Rung::overlap);
}

void attention_forward_overlap_with(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                                    DeviceContext& ctx, policies::GroupedHeads heads, policies::DenseRows rows) {
  overlap_with(p, in, out, ctx, heads, rows);
}

void attention_forward_overlap_with(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                                    DeviceContext& ctx, policies::GroupedHeads heads, policies::PackedRows rows) {
  if (rows.cu_seqlens == nullptr) throw UsageError("stage 09: the packed-rows policy needs cu_seqlens");
  overlap_with(p, in, out, ctx, heads, rows);
}

void attention_forward_persistent(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                                  DeviceContext& ctx) {
  forward(p, in, out, ctx, Rung::persistent);
}

}  // namespace fa::step09
