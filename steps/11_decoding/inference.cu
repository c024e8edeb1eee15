// Stage 11 — the host side: the problem's checks, how many splits, the launches (the split kernel of
// the merge's rung, then the merge kernel unless the split kernel merges itself: Merge::last_block,
// Merge::cluster), the paged copy of a cache, and stage 07 on the same problem with its K/V heads
// repeated. The plain read of the cache, the floor it is measured against, is lab/read_cache.cu.
//
// What changed from stage 07 (steps/07_tensor_cores/tensor_cores.cu): the grid is no longer (heads,
// query tiles) but (batch × K/V heads, key chunks, 16-row tiles), and the number of key chunks is
// chosen here from the shape and the GPU (choose_splits); with more than one chunk a second kernel
// merges the partial results, or (Merge::last_block) the split kernel's last block of each row tile,
// or (Merge::cluster) the blocks of each row tile's cluster, launched with cudaLaunchKernelEx.
//
// Build and run (verifies against float64 and stage 07 on the same inputs):
//   cmake -S . -B build -G Ninja && cmake --build build --target step11_decoding
//   build/steps/11_decoding/step11_decoding                   (--help for the flags)
#include "11_decoding/inference.cuh"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>
#include <utility>

#include "07_tensor_cores/tensor_cores.cuh"
#include "11_decoding/decode_kernel.cuh"
#include "11_decoding/ladder/v1_warp_per_row.cuh"
#include "11_decoding/ladder/v2_block_per_row.cuh"
#include "11_decoding/ladder/v3_last_block.cuh"
#include "11_decoding/launch_attributes.cuh"
#include "fa/cuda/ptx/grid_dependency.cuh"
#include "fa/cuda/check.cuh"
#include "fa/cuda/device.cuh"
#include "fa/cuda/repeat_heads.cuh"
#include "fa/cuda/dtype.cuh"
#include "fa/cuda/shared_memory.cuh"
#include "fa/cuda/stage_arch.cuh"

namespace fa::step11 {
namespace {

// The tile shape per head dim (DecodeConfig<D, warps, Bc keys per warp tile, stages>): 4 warps,
// two stages of K and V per warp, 8 KiB per tile (64 keys at D <= 64, 32 at 96 and 128, 16 at 256),
// about 130 KiB of shared memory per block. At D = 128, 8 warps of 16-key tiles and 4 warps of four
// 16-key stages ran within 4 % of it at B = 1 and 8k-128k keys (docs/results/step11_splits_h100.txt):
// the memory, not the tile, sets the pace.
template <int D>
struct StageConfig;
template <>
struct StageConfig<32> : DecodeConfig<32, 4, 64, 2> {};
template <>
struct StageConfig<64> : DecodeConfig<64, 4, 64, 2> {};
template <>
struct StageConfig<96> : DecodeConfig<96, 4, 32, 2> {};
template <>
struct StageConfig<128> : DecodeConfig<128, 4, 32, 2> {};
template <>
struct StageConfig<256> : DecodeConfig<256, 4, 16, 2> {};

constexpr int kMaxSplits = 128;
static_assert(StageConfig<128>::kMaxClusterSplits == kMaxClusterSplits,
              "the kernel's table of split LSEs holds as many splits as a cluster may have");
static_assert(kMaxSplits <= 128, "merge_block_per_row_kernel keeps one weight per split in 128 floats");

std::int64_t row_tiles(const Problem& p) { return (p.heads / p.kv_heads() * p.seq_q + 15) / 16; }

// A launch's cluster attribute: a row tile's splits, (1, splits, 1) blocks.
cudaLaunchAttribute cluster_of(int splits) {
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = 1;
  cluster.val.clusterDim.y = static_cast<unsigned>(splits);
  cluster.val.clusterDim.z = 1;
  return cluster;
}

// Clusters of `splits` blocks of kernel that the current GPU holds at once (0 below compute
// capability 9.0), asked of the driver once per GPU: beyond 8 blocks it depends on how the GPU's SMs
// are grouped (into GPCs; a cluster's blocks share one), and the kernel must opt in to such
// "non-portable" sizes. Once per GPU, because a launch asks before every launch.
template <auto kernel, int threads, int smem>
int clusters_at_once(int splits) {
  using Table = std::array<int, kMaxClusterSplits + 1>;
  static std::mutex mutex;
  static std::map<int, Table> per_gpu;
  int device = 0;
  FA_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard lock(mutex);
  auto [it, fresh] = per_gpu.try_emplace(device);
  if (fresh) {
    if (current_compute_capability() < 90) return 0;  // no clusters: the table stays zeros
    opt_in_shared_memory_once<kernel, smem>();
    FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    for (int s = 1; s <= kMaxClusterSplits; ++s) {
      cudaLaunchAttribute cluster = cluster_of(s);
      cudaLaunchConfig_t config{};
      config.gridDim = dim3(1, static_cast<unsigned>(s), 1);
      config.blockDim = dim3(threads);
      config.dynamicSmemBytes = smem;
      config.attrs = &cluster;
      config.numAttrs = 1;
      FA_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&it->second[s], kernel, &config));
    }
  }
  return it->second[std::clamp(splits, 1, kMaxClusterSplits)];
}

template <class T, int D>
int cluster_capacity_at(int splits) {
  using C = StageConfig<D>;
  if (splits < 1 || splits > kMaxClusterSplits) return 0;
  return clusters_at_once<flash_decode_kernel<T, C>, C::kThreads, C::kClusterSmemBytes>(splits);
}

// Merge::cluster's refusals, one line each: thread-block clusters need compute capability 9.0, and
// a cluster must be one that this GPU can hold (at most kMaxClusterSplits blocks; beyond 8, as the
// driver says).
template <class T, int D>
void require_clusters(int splits) {
  if (const int cc = current_compute_capability(); cc < 90)
    throw UsageError("stage 11 decode: the cluster merge needs thread-block clusters (compute capability 9.0; this GPU is " +
                     std::to_string(cc / 10) + "." + std::to_string(cc % 10) + ")");
  if (splits > kMaxClusterSplits)
    throw UsageError("stage 11 decode: the cluster merge takes at most " + std::to_string(kMaxClusterSplits) +
                     " splits (one cluster of that many blocks per row tile), not " + std::to_string(splits));
  if (splits > 1 && cluster_capacity_at<T, D>(splits) == 0)
    throw UsageError("stage 11 decode: this GPU cannot hold a cluster of " + std::to_string(splits) +
                     " blocks of the decode kernel (its SMs' grouping); the cluster merge needs fewer splits");
}

Merge resolved(Merge merge) { return merge == Merge::fastest ? fastest_merge() : merge; }

template <class T, int D>
DecodePlan plan_for(const Problem& p, int splits, Merge merge) {
  merge = resolved(merge);
  using C = StageConfig<D>;
  DecodePlan plan;
  plan.key_tile = C::kBc;
  plan.blocks = p.batch * p.kv_heads() * row_tiles(p);
  plan.slots = resident_blocks<flash_decode_kernel<T, C>, C::kThreads, C::kSmemBytes, C::kClusterSmemBytes>();
  const std::int64_t key_tiles = (p.seq_k + C::kBc - 1) / C::kBc;
  // A chunk holds at least two tiles per warp: fewer, and the block's start (Q, the first copies)
  // and end (the warps' merge, the partial write) outweigh its keys.
  plan.splits = splits > 0 ? splits : choose_splits(plan.blocks, key_tiles, plan.slots, 2 * C::kWarps, kMaxSplits);
  // Merge::cluster: at most a portable cluster. Larger ones, where this GPU holds them, were slower
  // on an H100 at batch 1 (docs/11_decoding.md: it holds 15 clusters of 8 of these blocks but 9 of
  // 9 and 7 of 10-16, so more splits meant fewer SMs or a second wave).
  if (merge == Merge::cluster && splits <= 0) plan.splits = std::min(plan.splits, kPortableClusterSplits);
  plan.tiles_per_split = static_cast<int>((key_tiles + plan.splits - 1) / plan.splits);
  return plan;
}

void check_launch(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, long long smem) {
  const std::string who = "stage 11 decode";
  if (p.seq_k > INT_MAX / 2 || p.seq_q > INT_MAX / 2 || p.batch * p.kv_heads() > INT_MAX ||
      p.heads / p.kv_heads() * p.seq_q > INT_MAX / 2)
    throw UsageError(who + ": Nq, Nk, B·Hkv or Hq/Hkv·Nq is too large for 32-bit indices");
  if (row_tiles(p) > 65535)
    throw UsageError(who + ": Hq/Hkv·Nq = " + std::to_string(p.heads / p.kv_heads() * p.seq_q) +
                     " query rows per K/V head is too many (at most " + std::to_string(65535 * 16) + ")");
  if (!aligned16(in.q.data) || !aligned16(in.k.data) || !aligned16(in.v.data) || !aligned16(out.o.data))
    throw UsageError(who + ": Q, K, V and O must be 16-byte aligned (the kernel moves 16-byte chunks)");
  if (const std::string refusal = shared_memory_refusal(smem, who + " at D = " + std::to_string(p.dim)); !refusal.empty())
    throw UsageError(refusal);
}

template <class T, int D>
void launch(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx,
            const DecodeOptions& options) {
  using C = StageConfig<D>;
  if (options.splits < 0 || options.splits > kMaxSplits)
    throw UsageError("stage 11 decode: splits must be in 1.." + std::to_string(kMaxSplits) + " (0: chosen)");
  const Merge merge = resolved(options.merge);
  if (merge == Merge::cluster) require_clusters<T, D>(options.splits);
  if (options.overlap_previous) require_overlap_support("stage 11 decode");
  const DecodePlan plan = plan_for<T, D>(p, options.splits, merge);
  const bool cluster_merges = plan.splits > 1 && merge == Merge::cluster;
  const int smem = cluster_merges ? C::kClusterSmemBytes : C::kSmemBytes;  // the cluster merge's inbox
  check_launch(p, in, out, smem);
  const long long rows = p.batch * p.heads * p.seq_q;
  DecodeArgs<T> a{};
  a.q = in.q.as<T>();
  a.k = in.k.as<T>();
  a.v = in.v.as<T>();
  a.o = out.o.as<T>();
  a.lse = out.lse.as<float>();
  if (plan.splits > 1 && !cluster_merges) {
    a.o_part = ctx.scratch_as<float>("decode partial O", static_cast<std::size_t>(plan.splits) * rows * p.dim);
    a.lse_part = ctx.scratch_as<float>("decode partial LSE", static_cast<std::size_t>(plan.splits) * rows);
  }
  a.cache_lens = options.cache_lens;
  a.block_table = options.paged.block_table;
  a.pages_per_seq = options.paged.pages_per_seq;
  a.page_size = options.paged.page_size;
  if (a.block_table != nullptr &&
      (a.page_size <= 0 || a.page_size % kPageMultiple != 0 ||
       static_cast<long long>(a.pages_per_seq) * a.page_size < p.seq_k))
    throw UsageError("stage 11 decode: a paged cache needs pages of a positive multiple of " +
                     std::to_string(kPageMultiple) + " keys covering Nk = " + std::to_string(p.seq_k));
  a.seq_q = static_cast<int>(p.seq_q);
  a.seq_k = static_cast<int>(p.seq_k);
  a.group = static_cast<int>(p.heads / p.kv_heads());
  a.heads_kv = static_cast<int>(p.kv_heads());
  a.splits = plan.splits;
  a.tiles_per_split = plan.tiles_per_split;
  const bool last_block_merges = plan.splits > 1 && merge == Merge::last_block;
  if (last_block_merges)  // zeroed once; each launch's merging blocks leave them at 0 again
    a.tile_counters = ctx.scratch_zeroed_as<unsigned>("decode split counters",
                                                      static_cast<std::size_t>(p.batch * p.kv_heads() * row_tiles(p)));
  a.cluster_merge = cluster_merges;
  a.rows = rows;
  a.scale = p.softmax_scale();
  a.scale_log2 = a.scale * static_cast<float>(M_LOG2E);
  a.causal = p.causal;
  a.overlap_previous = options.overlap_previous;

  const dim3 grid(static_cast<unsigned>(p.batch * p.kv_heads()), static_cast<unsigned>(plan.splits),
                  static_cast<unsigned>(row_tiles(p)));
  // The launch's attributes: with the cluster merge the same grid, its blocks grouped (1, splits, 1)
  // (a row tile's splits); in a stream of steps, permission to start before the previous kernel ends.
  std::array<cudaLaunchAttribute, 2> attributes{};
  unsigned count = 0;
  if (cluster_merges) attributes[count++] = cluster_of(plan.splits);
  if (options.overlap_previous) attributes[count++] = overlapping_previous();
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(C::kThreads);
  config.dynamicSmemBytes = smem;
  config.stream = ctx.stream;
  config.attrs = attributes.data();
  config.numAttrs = count;
  // Each merge runs the kernels of the rung that brought it (ladder/); the cluster merge, and
  // Merge::fastest on any GPU, the stage's kernel (decode_kernel.cuh), which keeps the lower rungs'
  // merges: below compute capability 9.0 its block merge is the default.
  const bool stage_kernel = options.merge == Merge::fastest || merge == Merge::cluster;
  auto launch_split = [&]<auto kernel, int opt_in>() {
    opt_in_shared_memory_once<kernel, opt_in>();
    FA_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, a));
  };
  ctx.kernel_begin("split");
  if (stage_kernel)
    launch_split.template operator()<flash_decode_kernel<T, C>, C::kClusterSmemBytes>();
  else if (merge == Merge::warp_per_row)
    launch_split.template operator()<v1_warp_per_row::flash_decode_kernel<T, C>, C::kSmemBytes>();
  else if (merge == Merge::block_per_row)
    launch_split.template operator()<v2_block_per_row::flash_decode_kernel<T, C>, C::kSmemBytes>();
  else
    launch_split.template operator()<v3_last_block::flash_decode_kernel<T, C>, C::kSmemBytes>();
  FA_CUDA_CHECK_LAUNCH();
  ctx.kernel_end("split");
  if (plan.splits > 1 && !last_block_merges && !cluster_merges) {
    ctx.kernel_begin("combine");
    const int dim = static_cast<int>(p.dim);
    if (merge == Merge::warp_per_row)
      v1_warp_per_row::combine_kernel<T><<<static_cast<unsigned>((rows + 3) / 4), 128, 0, ctx.stream>>>(
          a.o_part, a.lse_part, a.o, a.lse, rows, plan.splits, dim);
    else  // the block-per-row merge, and the stage's own below compute capability 9.0 (no clusters)
      v2_block_per_row::merge_block_per_row_kernel<T><<<static_cast<unsigned>(rows), 128, 0, ctx.stream>>>(
          a.o_part, a.lse_part, a.o, a.lse, rows, plan.splits, dim);
    FA_CUDA_CHECK_LAUNCH();
    ctx.kernel_end("combine");
  }
}

// K or V [B, Hkv, Nk, D] into a pool of pages [B·pages_per_seq, Hkv, page_size, D]: entry b's page j
// (its keys j·page_size ..) goes to pool page (b·pages_per_seq + j)·stride mod pages, stride coprime
// to the page count (a scattered order, as pages come in a serving engine); keys past Nk are zeros.
// The block table row b lists entry b's pages. 16 bytes per thread, a grid-stride loop in the
// sequences' order (b, h, key, chunk).
__global__ void page_kv_kernel(const int4* from, int4* pool, int* block_table, int heads_kv, int seq_k, int page_size,
                               int pages_per_seq, long long pages, long long stride, int chunks_per_row) {
  const long long keys = static_cast<long long>(pages_per_seq) * page_size;
  const long long total = pages * heads_kv * page_size * chunks_per_row;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int chunk = static_cast<int>(i % chunks_per_row);
    const long long key = i / chunks_per_row % keys, head = i / chunks_per_row / keys;  // head = b·Hkv + h
    const long long b = head / heads_kv, h = head % heads_kv;
    const long long logical = b * pages_per_seq + key / page_size, page = logical * stride % pages;
    pool[((page * heads_kv + h) * page_size + key % page_size) * chunks_per_row + chunk] =
        key < seq_k ? from[(head * seq_k + key) * chunks_per_row + chunk] : int4{0, 0, 0, 0};
    if (h == 0 && key % page_size == 0 && chunk == 0) block_table[logical] = static_cast<int>(page);
  }
}

}  // namespace

int choose_splits(std::int64_t blocks, std::int64_t key_tiles, std::int64_t slots, std::int64_t min_tiles,
                  int max_splits) {
  if (blocks <= 0 || key_tiles <= 0 || slots <= 0) return 1;
  // Blocks that stream from memory at once: about half the GPU's slots keep the H100's memory busy
  // (measured, docs/results/step11_splits_h100.txt: 64 blocks beat 128 at 32k and 128k keys, and
  // each further split adds its block's start and end, and its partial result).
  const std::int64_t streaming = (slots + 1) / 2;
  if (blocks >= streaming) return 1;
  const std::int64_t most = std::max<std::int64_t>(
      1, std::min<std::int64_t>(max_splits, key_tiles / std::max<std::int64_t>(min_tiles, 1)));
  return static_cast<int>(std::min<std::int64_t>(most, (streaming + blocks - 1) / blocks));
}

// f.template operator()<T, D>() for p's dtype and head dim: the host functions that launch, or ask
// about, the one decode kernel that p runs.
template <class F>
auto for_kernel_of(const Problem& p, F&& f) {
  p.require(kSupports);
  const bool half = p.dtype == DType::float16;
  auto at = [&]<int D>() { return half ? f.template operator()<__half, D>() : f.template operator()<__nv_bfloat16, D>(); };
  switch (p.dim) {
    case 32: return at.template operator()<32>();
    case 64: return at.template operator()<64>();
    case 96: return at.template operator()<96>();
    case 128: return at.template operator()<128>();
    default: return at.template operator()<256>();
  }
}

Merge fastest_merge() { return current_compute_capability() >= 90 ? Merge::cluster : Merge::block_per_row; }

DecodePlan plan_decode(const Problem& p, int splits, Merge merge) {
  return for_kernel_of(p, [&]<class T, int D>() { return plan_for<T, D>(p, splits, merge); });
}

int cluster_capacity(const Problem& p, int splits) {
  return for_kernel_of(p, [&]<class T, int D>() { return cluster_capacity_at<T, D>(splits); });
}

void decode_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx,
                    const DecodeOptions& options) {
  for_kernel_of(p, [&]<class T, int D>() { launch<T, D>(p, in, out, ctx, options); });
}

void attention_forward_split_kv(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                                DeviceContext& ctx) {
  decode_forward(p, in, out, ctx, DecodeOptions{});
}

void attention_forward_one_split(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                                 DeviceContext& ctx) {
  decode_forward(p, in, out, ctx, DecodeOptions{.splits = 1});
}

void decode_forward_paged(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx,
                          DecodeOptions options, int page_size) {
  p.require(kSupports);
  if (page_size <= 0 || page_size % kPageMultiple != 0)
    throw UsageError("stage 11, paged cache: the page size must be a positive multiple of " +
                     std::to_string(kPageMultiple) + " keys (got " + std::to_string(page_size) + ")");
  const long long pages_per_seq = (p.seq_k + page_size - 1) / page_size, pages = p.batch * pages_per_seq;
  if (pages > INT_MAX) throw UsageError("stage 11, paged cache: more pages than 32-bit page numbers");
  const long long chunks_per_row = p.dim * static_cast<long long>(size_of(p.dtype)) / 16;  // D·2 bytes: D >= 32
  const std::size_t pool_bytes = static_cast<std::size_t>(pages * p.kv_heads() * page_size * chunks_per_row * 16);
  void* k_pool = ctx.scratch("paged K pool", pool_bytes);
  void* v_pool = ctx.scratch("paged V pool", pool_bytes);
  int* table = ctx.scratch_as<int>("paged block table", static_cast<std::size_t>(pages));
  long long stride = pages / 2 + 1;  // the scattered order: any stride coprime to the page count
  while (std::gcd(stride, pages) != 1) ++stride;
  const long long total = pages * p.kv_heads() * page_size * chunks_per_row;
  const unsigned blocks = static_cast<unsigned>(std::min<long long>((total + 255) / 256, 65535));
  ctx.kernel_begin("page K/V");
  for (const auto& [from, to] : {std::pair{in.k.data, k_pool}, std::pair{in.v.data, v_pool}}) {
    page_kv_kernel<<<blocks, 256, 0, ctx.stream>>>(static_cast<const int4*>(from), static_cast<int4*>(to), table,
                                                   static_cast<int>(p.kv_heads()), static_cast<int>(p.seq_k), page_size,
                                                   static_cast<int>(pages_per_seq), pages, stride,
                                                   static_cast<int>(chunks_per_row));
    FA_CUDA_CHECK_LAUNCH();
  }
  ctx.kernel_end("page K/V");
  const Shape4 pool_shape{pages, p.kv_heads(), page_size, p.dim};
  const AttentionInputs pooled{in.q, ConstTensorView{k_pool, p.dtype, pool_shape}, ConstTensorView{v_pool, p.dtype, pool_shape}};
  options.paged = PagedCache{table, static_cast<int>(pages_per_seq), page_size};
  decode_forward(p, pooled, out, ctx, options);
}

void stage07_repeated_heads(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                            DeviceContext& ctx) {
  with_repeated_heads(p, in, out, ctx, step07::attention_forward, "stage 11");
}


std::string device_refusal(const Problem& p) {
  if (!cuda_skip_reason(kStageMinComputeCapability).empty()) return "";  // the harness skips
  long long smem = 0;
  switch (p.dim) {
    case 32: smem = StageConfig<32>::kSmemBytes; break;
    case 64: smem = StageConfig<64>::kSmemBytes; break;
    case 96: smem = StageConfig<96>::kSmemBytes; break;
    case 128: smem = StageConfig<128>::kSmemBytes; break;
    case 256: smem = StageConfig<256>::kSmemBytes; break;
    default: return "";  // the CLI refuses it (kSupports)
  }
  if (std::string refusal = shared_memory_refusal(smem, "stage 11's decode kernel at D = " + std::to_string(p.dim));
      !refusal.empty())
    return refusal;
  return step07::device_refusal(p);  // the comparison beside it
}

}  // namespace fa::step11
