// Stage 10 — the host side: the problem's checks, the tile shape of each head dim, the tensor maps
// and the launch of a rung's key-tile kernel (ladder/; the stage's is kStageRung, rung 14), inside
// the backward's frame.
//
// What changed from stage 08 (steps/08_tensor_core_backward/tensor_core_backward.cu): the key-tile
// kernel is a wgmma kernel built for sm_90a, given tensor maps built on the host at every launch
// (Q, dO, K, V, and from rung 3 on the float32 dQ accumulator, which the TMA adds into); the frame
// around it is stage 08's, shared through common/ (fa/cuda/backward/frame.cuh): D = rowsum(dO∘O)
// and LSE·log2e before (padded to 640 rows, a multiple of every query tile), the float32 dQ accumulator
// zeroed before and converted to 16 bits after. The forward is stage 09's. Limits: D = 64 and 128
// (D = 256: split_columns.cuh, the stage's kernel only), B·Hq ≤ 65535; grouped heads (Hkv < Hq)
// from rung 3 on. fastest_backward is what a later stage calls: this stage on Hopper, stage 08
// elsewhere.
//
// Build and run (verifies against float64 with the 16-bit rule, beside stage 08 on the same inputs):
//   cmake -S . -B build -G Ninja && cmake --build build --target step10_hopper_backward
//   build/steps/10_hopper_backward/step10_hopper_backward              (--help for the flags)
#include "10_hopper_backward/hopper_backward.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <string>
#include <string_view>
#include <type_traits>

#include "08_tensor_core_backward/tensor_core_backward.cuh"
#include "09_hopper/hopper.cuh"
#include "10_hopper_backward/ladder/v1_wgmma.cuh"
#include "10_hopper_backward/ladder/v2_rows_in_shared.cuh"
#include "10_hopper_backward/ladder/v3_dq_by_tma.cuh"
#include "10_hopper_backward/ladder/v4_own_dq.cuh"
#include "10_hopper_backward/ladder/v5_ds_by_stmatrix.cuh"
#include "10_hopper_backward/ladder/v6_three_groups.cuh"
#include "10_hopper_backward/ladder/v7_group_barrier.cuh"
#include "10_hopper_backward/ladder/v8_wide_query_tiles.cuh"
#include "10_hopper_backward/ladder/v9_fast_exp.cuh"
#include "10_hopper_backward/ladder/v10_dq_before_dk.cuh"
#include "10_hopper_backward/ladder/v11_dv_early.cuh"
#include "10_hopper_backward/ladder/v12_tiles_of_80.cuh"
#include "10_hopper_backward/ladder/v13_heavy_first.cuh"
#include "10_hopper_backward/ladder/v14_split_tail.cuh"
#include "10_hopper_backward/split_columns.cuh"
#include "fa/cuda/backward/frame.cuh"
#include "fa/cuda/check.cuh"
#include "fa/cuda/nvtx.cuh"
#include "fa/cuda/resident_blocks.cuh"
#include "fa/cuda/shared_memory.cuh"

namespace fa::step10 {

namespace {

// Rungs 1 to 5: two warpgroups of 64 keys (Bc = 128) at both head dims, query tiles of 64: at
// D = 128 that is 64 KiB of K and V, 64 KiB of Q and dO (two buffers), 16 KiB of dS, one block per
// SM (and from rung 3 on 64 KiB of dQ's buffers). The stage's kernel is rung 14 (rung 12's query
// tiles of 80 at D = 128, rung 10's of 128 at D = 64, the longest blocks first under the mask, the
// last wave's key tiles split without it; rung 11 measured slower).
template <int D>
using V1Config = WgmmaBackwardConfig<D, 2>;
template <int D>
using V2Config = RowsInSharedConfig<D, 2>;
template <int D>
using V3Config = DqByTmaConfig<D, 2>;
template <int D>
using V4Config = OwnDqConfig<D, 2>;
template <int D>
using V5Config = DqByTmaConfig<D, 2>;
template <int D>
using V6Config = ThreeGroupsConfig<D>;  // three warpgroups at D = 64
template <int D>
using V7Config = ThreeGroupsConfig<D>;
template <int D>
using V8Config = WideQueryTilesConfig<D>;  // query tiles of 128 and two warpgroups at D = 64
template <int D>
using V9Config = WideQueryTilesConfig<D>;
template <int D>
using V10Config = WideQueryTilesConfig<D>;
template <int D>
using V11Config = WideQueryTilesConfig<D>;
template <int D>
using V12Config = TilesOf80Config<D>;  // query tiles of 80 and one dQ buffer at D = 128
template <int D>
using V13Config = TilesOf80Config<D>;  // rung 12's tile shape; only the blocks' order changes
template <int D>
using V14Config = TilesOf80Config<D>;  // and rung 14's: only the last wave's blocks change

// Rung 14's plan (tail_split.hpp): blocks resident at once, the device's SMs times the kernel's
// blocks per SM (fa::resident_blocks, asked once), unless a test sets a smaller count to split its
// small shapes.
int g_tail_slots_for_testing = 0;
// A piece's cost beyond its share of the steps, in steps (its loads of K and V, its dK and dV by
// atomics): the model's one number, an estimate.
constexpr double kPieceCostSteps = 1.0;

template <class C, auto kKernel>
long long tail_slots() {
  if (g_tail_slots_for_testing > 0) return g_tail_slots_for_testing;
  return resident_blocks<kKernel, C::kThreads, C::kSmemBytes>();
}

// One launch of a rung's kernel (kKernel, instantiated at T and C) with its tensor maps (Maps:
// BackwardMaps, or BackwardMapsWithDq for the rungs that add dQ by the TMA; kOrdered: the
// deterministic variant, which takes its turn counters; kSplitTail: rung 14, whose last wave may
// be split into pieces without the mask).
template <class T, class C, auto kKernel, class Maps = BackwardMaps, bool kOrdered = false, bool kSplitTail = false>
void launch_config(const Problem& p, const bwd::BackwardArgs<T>& args, DeviceContext& ctx) {
  constexpr int D = C::D;
  opt_in_shared_memory_once<kKernel, C::kSmemBytes>();
  const std::int64_t heads = p.heads_total(), kv_heads = p.batch * p.kv_heads();
  Maps maps{};
  maps.q = hopper::make_tile_map<T>(args.q, heads, p.seq_q, D, C::kBr);
  maps.d_o = hopper::make_tile_map<T>(args.d_o, heads, p.seq_q, D, C::kBr);
  maps.k = hopper::make_tile_map<T>(args.k, kv_heads, p.seq_k, D, C::kBc);
  maps.v = hopper::make_tile_map<T>(args.v, kv_heads, p.seq_k, D, C::kBc);
  if constexpr (std::is_same_v<Maps, BackwardMapsWithDq>)
    maps.dq = hopper::make_float_tile_map(args.dq_accum, heads, p.seq_q, D, C::kBr);
  // The grid: (key tiles, K/V heads); which tile a block owns, in index order or (rung 13, with
  // the mask) the longest first: block_order.hpp.
  const int key_tiles = static_cast<int>((p.seq_k + C::kBc - 1) / C::kBc);
  dim3 grid(static_cast<unsigned>(key_tiles), static_cast<unsigned>(kv_heads));
  // Rung 14 without the mask: the plan for the last wave, its float32 sums zeroed, and the grid's
  // rows grown to hold the pieces (the blocks past the last piece return at once).
  TailSplit split{};
  if constexpr (kSplitTail) {
    if (!p.causal) {
      const int walk = static_cast<int>((p.seq_q + C::kBr - 1) / C::kBr * (p.heads / p.kv_heads()));
      split = plan_tail_split(static_cast<long long>(key_tiles) * kv_heads, tail_slots<C, kKernel>(), walk,
                              kPieceCostSteps);
      if ((split_blocks(split) + key_tiles - 1) / key_tiles > 65535) split = TailSplit{};  // the grid's rows
    }
  }
  ctx.kernel_begin("dkdv+dq");
  if (split.split_tiles > 0) {
    const auto sums = static_cast<std::size_t>(split.split_tiles) * C::kBc * D;
    float* dkv = ctx.scratch_as<float>("split_tail_dkv", 2 * sums);
    FA_CUDA_CHECK(cudaMemsetAsync(dkv, 0, 2 * sums * sizeof(float), ctx.stream));
    split.dk = dkv;
    split.dv = dkv + sums;
    grid.y = static_cast<unsigned>((split_blocks(split) + key_tiles - 1) / key_tiles);
  }
  if constexpr (std::is_same_v<Maps, BackwardMapsWithDq>) {
    // Rung 3 on: grouped heads (G per K/V head), and for the ordered dQ one counter per query head
    // and query tile, zeroed here (the rung that adds as the tiles come gets none).
    const int query_tiles = static_cast<int>((p.seq_q + C::kBr - 1) / C::kBr);
    int* dq_turns = nullptr;
    if constexpr (kOrdered) {
      const std::size_t turns = static_cast<std::size_t>(heads) * static_cast<std::size_t>(query_tiles);
      dq_turns = ctx.scratch_as<int>("dq_turns", turns);
      FA_CUDA_CHECK(cudaMemsetAsync(dq_turns, 0, turns * sizeof(int), ctx.stream));
    }
    const int heads_per_kv = static_cast<int>(p.heads / p.kv_heads());
    // The kernels of rungs 3 and 5 to 14 (ladder/v3_dq_by_tma.cuh) take the split (none but rung 14's
    // is given one); rung 4's and D = 256's do not.
    if constexpr (std::is_invocable_v<decltype(kKernel), Maps, bwd::BackwardArgs<T>, int, int*, int, TailSplit>) {
      kKernel<<<grid, C::kThreads, C::kSmemBytes, ctx.stream>>>(maps, args, heads_per_kv, dq_turns, query_tiles, split);
      if constexpr (kSplitTail) {
        if (split.split_tiles > 0) {  // the split tiles' dK and dV, from their float32 sums
          FA_CUDA_CHECK_LAUNCH();
          const auto blocks = static_cast<unsigned>((split.split_tiles * C::kBc * D + 255) / 256);  // an element each
          finish_split_tiles_kernel<T, C::kBc, D><<<blocks, 256, 0, ctx.stream>>>(split, args.dk, args.dv, key_tiles,
                                                                                   static_cast<int>(p.seq_k), args.scale);
        }
      }
    } else {
      kKernel<<<grid, C::kThreads, C::kSmemBytes, ctx.stream>>>(maps, args, heads_per_kv, dq_turns, query_tiles);
    }
  } else
    kKernel<<<grid, C::kThreads, C::kSmemBytes, ctx.stream>>>(maps, args);
  FA_CUDA_CHECK_LAUNCH();
  ctx.kernel_end("dkdv+dq");
}

template <class T, int D>
void launch_rung(Rung rung, const Problem& p, const bwd::BackwardArgs<T>& args, DeviceContext& ctx) {
  switch (rung) {
    case Rung::wgmma: launch_config<T, V1Config<D>, backward_wgmma_kernel<T, V1Config<D>>>(p, args, ctx); break;
    case Rung::rows_in_shared:
      launch_config<T, V2Config<D>, backward_rows_kernel<T, V2Config<D>>>(p, args, ctx);
      break;
    case Rung::dq_by_tma:
      launch_config<T, V3Config<D>, backward_dq_tma_kernel<T, V3Config<D>>, BackwardMapsWithDq>(p, args, ctx);
      break;
    case Rung::deterministic:
      launch_config<T, V13Config<D>, backward_deterministic_kernel<T, V13Config<D>>, BackwardMapsWithDq, true>(p, args,
                                                                                                             ctx);
      break;
    case Rung::own_dq:
      launch_config<T, V4Config<D>, backward_own_dq_kernel<T, V4Config<D>>, BackwardMapsWithDq>(p, args, ctx);
      break;
    case Rung::ds_by_stmatrix:
      launch_config<T, V5Config<D>, backward_ds_by_stmatrix_kernel<T, V5Config<D>>, BackwardMapsWithDq>(p, args, ctx);
      break;
    case Rung::three_groups:
      launch_config<T, V6Config<D>, backward_ds_by_stmatrix_kernel<T, V6Config<D>>, BackwardMapsWithDq>(p, args, ctx);
      break;
    case Rung::group_barrier:
      launch_config<T, V7Config<D>, backward_group_barrier_kernel<T, V7Config<D>>, BackwardMapsWithDq>(p, args, ctx);
      break;
    case Rung::wide_query_tiles:
      launch_config<T, V8Config<D>, backward_ds_by_stmatrix_kernel<T, V8Config<D>>, BackwardMapsWithDq>(p, args, ctx);
      break;
    case Rung::fast_exp:
      launch_config<T, V9Config<D>, backward_fast_exp_kernel<T, V9Config<D>>, BackwardMapsWithDq>(p, args, ctx);
      break;
    case Rung::dq_before_dk:
      launch_config<T, V10Config<D>, backward_dq_before_dk_kernel<T, V10Config<D>>, BackwardMapsWithDq>(p, args, ctx);
      break;
    case Rung::dv_early:
      launch_config<T, V11Config<D>, backward_dv_early_kernel<T, V11Config<D>>, BackwardMapsWithDq>(p, args, ctx);
      break;
    case Rung::tiles_of_80:
      launch_config<T, V12Config<D>, backward_tiles_of_80_kernel<T, V12Config<D>>, BackwardMapsWithDq>(p, args, ctx);
      break;
    case Rung::heavy_first:
      launch_config<T, V13Config<D>, backward_heavy_first_kernel<T, V13Config<D>>, BackwardMapsWithDq>(p, args, ctx);
      break;
    case Rung::split_tail:
      launch_config<T, V14Config<D>, backward_split_tail_kernel<T, V14Config<D>>, BackwardMapsWithDq, false, true>(
          p, args, ctx);
      break;
  }
}

template <class T>
void launch_key_tiles(Rung rung, const Problem& p, const bwd::BackwardArgs<T>& args, DeviceContext& ctx) {
  if (p.dim == 256)  // one kernel there (check_problem refuses the rungs)
    launch_config<T, SplitColumnsConfig, backward_split_columns_kernel<T, SplitColumnsConfig>, BackwardMapsWithDq>(
        p, args, ctx);
  else if (p.dim == 64)
    launch_rung<T, 64>(rung, p, args, ctx);
  else
    launch_rung<T, 128>(rung, p, args, ctx);
}

// The problem's checks, one line each (UsageError): what neither kernel nor launch can run.
void check_problem(Rung rung, const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView d_o,
                   const AttentionGradients& grads) {
  p.require(kSupports);
  // runs_here() asks the device once: reading its properties on every call (skip_reason) took about
  // a millisecond, which the timed backward would include.
  if (!step09::runs_here()) throw UsageError("stage 10: " + skip_reason());
  if (p.heads % p.kv_heads() != 0) throw UsageError("stage 10: Hq must be a multiple of Hkv");
  if (p.heads_total() > 65535 || p.seq_q > INT_MAX / 2 || p.seq_k > INT_MAX / 2)
    throw UsageError("stage 10: B·Hq is at most 65535 (the TMA's head coordinate, the grid) and Nq, Nk fit 32-bit "
                     "indices");
  if (p.dim == 256 && rung != kStageRung)
    throw UsageError("stage 10: at D = 256 only the stage's kernel runs (split_columns.cuh), not the ladder's rungs "
                     "or the deterministic variant");
  if (p.kv_heads() != p.heads && (rung == Rung::wgmma || rung == Rung::rows_in_shared))
    throw UsageError("stage 10's rungs 1 and 2 run Hkv = Hq only (grouped heads: rung 3 on)");
  // Rungs 3 to 12 need the most (rung 2 plus dQ's buffers); every rung is refused together.
  static_assert(V3Config<128>::kSmemBytes >= V2Config<128>::kSmemBytes &&
                    V2Config<128>::kSmemBytes >= V1Config<128>::kSmemBytes,
                "rung 3 needs more shared memory than rungs 1 and 2");
  constexpr long long kD64 = std::max({V3Config<64>::kSmemBytes, V4Config<64>::kSmemBytes, V6Config<64>::kSmemBytes,
                                       V7Config<64>::kSmemBytes, V8Config<64>::kSmemBytes});
  constexpr long long kD128 = std::max({V3Config<128>::kSmemBytes, V4Config<128>::kSmemBytes, V12Config<128>::kSmemBytes});
  const long long bytes = p.dim == 256 ? SplitColumnsConfig::kSmemBytes : p.dim == 64 ? kD64 : kD128;
  if (const std::string refusal =
          shared_memory_refusal(bytes, "stage 10's backward kernel at D = " + std::to_string(p.dim));
      !refusal.empty())
    throw UsageError(refusal);
  if (!bwd::backward_tensors_aligned16(in, o, d_o, grads))
    throw UsageError("stage 10: every tensor must be 16-byte aligned (the TMA's tiles)");
}

// The frame (preprocessing, float32 dQ, conversion) around the key-tile kernel of p.dim.
template <class T>
void backward(Rung rung, const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse,
              ConstTensorView d_o, const AttentionGradients& grads, DeviceContext& ctx) {
  NvtxRange range("step10/backward");
  const bwd::BackwardArgs<T> args = bwd::prepare_backward<T>(p, in, o, lse, d_o, grads, ctx, /*atomic_dq=*/true);
  launch_key_tiles<T>(rung, p, args, ctx);
  bwd::finish_atomic_dq<T>(p, args, grads, ctx);
}

}  // namespace

std::string skip_reason() { return step09::hopper_skip_reason(); }

void set_tail_slots_for_testing(int slots) { g_tail_slots_for_testing = slots; }

const char* fastest_backward_stage(const Problem& p) {
  return step09::runs_here() && kSupports.has_dim(p.dim) ? "10" : "08";
}

void fastest_backward(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse,
                      ConstTensorView d_o, const AttentionGradients& grads, DeviceContext& ctx) {
  if (std::string_view(fastest_backward_stage(p)) == "10")
    attention_backward(p, in, o, lse, d_o, grads, ctx);
  else
    step08::attention_backward(p, in, o, lse, d_o, grads, ctx);
}

void attention_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx) {
  if (p.kv_heads() == p.heads) return step09::attention_forward_overlap(p, in, out, ctx);
  // Grouped heads: stage 09's kernel with the policy that points query head bh at K/V head bh / G.
  step09::attention_forward_overlap_with(p, in, out, ctx, policies::GroupedHeads{static_cast<int>(p.heads / p.kv_heads())},
                                         policies::DenseRows{});
}

void attention_backward_rung(Rung rung, const Problem& p, const AttentionInputs& in, ConstTensorView o,
                             ConstTensorView lse, ConstTensorView d_o, const AttentionGradients& grads,
                             DeviceContext& ctx) {
  check_problem(rung, p, in, o, d_o, grads);
  if (p.dtype == DType::float16)
    backward<__half>(rung, p, in, o, lse, d_o, grads, ctx);
  else
    backward<__nv_bfloat16>(rung, p, in, o, lse, d_o, grads, ctx);
}

void attention_backward(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse,
                        ConstTensorView d_o, const AttentionGradients& grads, DeviceContext& ctx) {
  attention_backward_rung(kStageRung, p, in, o, lse, d_o, grads, ctx);
}

}  // namespace fa::step10
