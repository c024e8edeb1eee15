// Stage 11 — attention as inference runs it: grouped-query heads and split-KV decoding (a few
// query rows against a long key/value cache), the splits merged by the LSE rule (inference.cu,
// decode_kernel.cuh, split_merge.hpp; docs/11_decoding.md), four ways to merge the splits, a
// paged cache (decode_forward_paged). Prefill with grouped heads and packed batches is stage 12's.
#pragma once

#include <cstdint>
#include <string>

#include "fa/cuda/stage_gpu.cuh"
#include "fa/problem.hpp"
#include "fa/tensor.hpp"

namespace fa::step11 {

// fp16 or bf16 (float32 accumulators, partials and LSE); grouped heads (Hq a multiple of Hkv,
// Hkv = 1 is multi-query); D = 64 and 128 tuned, 32, 96, 256 correct. Nq is any length (decoding
// is Nq = 1 to 16; longer Nq runs, 16 rows per block, but is stage 07/09's shape).
inline const Supports kSupports{
    .dtypes = {DType::bfloat16, DType::float16}, .dims = {32, 64, 96, 128, 256}, .grouped_heads = true};
// How the splits' partial results become O and LSE (one split: no merge at all).
// The four are the rungs of the stage's merge ladder (ladder/v1_warp_per_row.cuh, v2_block_per_row.cuh,
// v3_last_block.cuh, then the stage's kernel, decode_kernel.cuh); each runs its rung's kernels.
enum class Merge {
  warp_per_row,   // a second kernel, a warp per query row (combine_kernel): the first version
  block_per_row,  // a second kernel, a block per row (merge_block_per_row_kernel): measured faster
  last_block,     // no second kernel: the last block of each row tile to finish merges its rows
  cluster,        // no second kernel, no partials in global memory: a row tile's splits are one
                  // thread-block cluster, each warp sending its part into the shared memory of the
                  // blocks that merge it (compute capability 9.0; at most kMaxClusterSplits splits)
  fastest,        // the fastest measured on this GPU (docs/11_decoding.md): cluster on compute
                  // capability 9.0, block_per_row elsewhere (fastest_merge() says which)
};
// The largest cluster Hopper allows. Up to 8 blocks a cluster is "portable" (every such GPU runs it);
// beyond, the kernel opts in and whether the GPU holds one depends on how its SMs are grouped
// (cluster_capacity asks the driver). The chosen splits stay portable; --splits may ask for more.
inline constexpr int kMaxClusterSplits = 16, kPortableClusterSplits = 8;

// A paged K/V cache, as serving engines keep one: K and V are pools of pages [pages, Hkv, page_size,
// D] (each page holds page_size consecutive keys of every K/V head of one sequence), and row b of
// the block table names the pool pages of batch entry b, in order: keys [j·page_size, (j+1)·page_size)
// are in page block_table[b·pages_per_seq + j]. (FlashAttention's and vLLM's pools keep the tokens
// first, [pages, page_size, Hkv, D]; heads first keeps each (page, head) one contiguous block.)
struct PagedCache {
  const int* block_table = nullptr;  // device [B][pages_per_seq]; nullptr: no paging
  int pages_per_seq = 0;             // pages_per_seq · page_size >= Nk
  int page_size = 0;                 // keys per page: a multiple of kPageMultiple
};
inline constexpr int kPageMultiple = 64;  // the largest key tile (D <= 64): no tile crosses a page

struct DecodeOptions {
  int splits = 0;                   // key chunks; 0: choose_splits on this GPU
  const int* cache_lens = nullptr;  // device [B]: each batch entry's cache length (<= Nk); nullptr: Nk
  Merge merge = Merge::fastest;
  PagedCache paged;                 // with a block table, in.k and in.v are the pools
  // A step in a stream of steps (programmatic dependent launch, compute capability 9.0): the split
  // kernel may start while the kernel before it in the stream still runs, copying its first tiles of
  // older keys; it reads Q, the newest Nq keys, cache_lens and the block table only once that kernel
  // has finished (decode_kernel.cuh's header). The tool step11_stream measures what it buys.
  bool overlap_previous = false;
};

// Split-KV decoding (fa::DeviceForward with options): Q [B, Hq, Nq, D], K, V [B, Hkv, Nk, D] of
// p.dtype, 16-byte aligned; O and LSE written. With more than one split, the partial results
// (splits · B·Hq·Nq · (D + 1) floats) live in ctx's scratch, counted on its meter, and with
// Merge::last_block one counter per (batch, K/V head, row tile) beside them (4 bytes each);
// Merge::cluster keeps them in shared memory (no scratch), and refuses (UsageError) more than
// kMaxClusterSplits splits, a cluster the GPU cannot hold, or a GPU below compute capability 9.0.
void decode_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx,
                    const DecodeOptions& options);

// The same decoding on a paged copy of the cache: in.k and in.v ([B, Hkv, Nk, D]) are copied into
// pools of `page_size`-key pages in a scattered order (the copy is its own kernel, timed apart as
// "page K/V" in the results' split_ms, and counted on the meter), then decode_forward reads them
// through the block table. The result is bitwise decode_forward's on the contiguous cache.
void decode_forward_paged(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx,
                          DecodeOptions options, int page_size);

// The stage's variants, as fa::DeviceForward: the splits chosen for this GPU, and one split (one
// block per (batch, K/V head, 16 rows): what the grid is without the idea).
void attention_forward_split_kv(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                                DeviceContext& ctx);
void attention_forward_one_split(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                                 DeviceContext& ctx);

// Not attention: the plain read of the cache, the floor (variant read_cache): lab/read_cache.cuh.

// The previous stage on the same problem: K and V repeated to Hq heads (scratch, counted), then
// stage 07's forward, which knows no grouped heads. Its time includes the repeat.
void stage07_repeated_heads(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                            DeviceContext& ctx);

// The number of key chunks (docs/11_decoding.md, "How many splits"): `blocks` blocks without
// splitting (B·Hkv·row tiles), `key_tiles` tiles of keys, `slots` blocks the GPU runs at once (SMs
// times blocks per SM), `min_tiles` the fewest tiles a chunk should hold. One split when the
// blocks fill half the slots already; otherwise the fewest splits that do, at most max_splits and
// key_tiles / min_tiles (half: what the H100's memory needed, measured).
int choose_splits(std::int64_t blocks, std::int64_t key_tiles, std::int64_t slots, std::int64_t min_tiles,
                  int max_splits = 128);

// What the kernel's launch would be on this GPU for p: splits and blocks (for the chapter's table
// and the tests).
struct DecodePlan {
  int splits = 1, tiles_per_split = 0, key_tile = 0;
  std::int64_t blocks = 0, slots = 0;
};
// With Merge::cluster the chosen splits are at most kPortableClusterSplits.
DecodePlan plan_decode(const Problem& p, int splits = 0, Merge merge = Merge::warp_per_row);

// What Merge::fastest is on the current GPU: Merge::cluster on compute capability 9.0 and above,
// Merge::block_per_row below.
Merge fastest_merge();

// Merge::cluster on this GPU: how many clusters of `splits` blocks of the decode kernel for p.dim
// and p.dtype it runs at once (the occupancy API); 0 below compute capability 9.0 or where not even
// one fits (then the cluster merge refuses that many splits).
int cluster_capacity(const Problem& p, int splits);

// For the stage's main, before the run: the one line of a refusal when this GPU cannot run the
// kernel at p.dim (its shared memory), empty otherwise (and without a suitable GPU).
std::string device_refusal(const Problem& p);

}  // namespace fa::step11
