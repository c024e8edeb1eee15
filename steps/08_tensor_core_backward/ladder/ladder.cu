// ladder.cu — the host side of stage 08's ladder: each rung is the stage's backward (its checks,
// preprocessing and dQ conversion, attention_backward_with) with the rung's key-tile kernel. The
// kernels and what each adds: ladder.cuh and the v*.cuh files beside it.
#include "08_tensor_core_backward/ladder/ladder.cuh"

#include <string>
#include <type_traits>

#include "08_tensor_core_backward/backward_tiles.cuh"
#include "08_tensor_core_backward/ladder/v1_mma.cuh"
#include "08_tensor_core_backward/ladder/v2_ldmatrix.cuh"
#include "08_tensor_core_backward/ladder/v3_cp_async.cuh"
#include "08_tensor_core_backward/ladder/v4_registers.cuh"
#include "08_tensor_core_backward/ladder/v5_whole_tiles.cuh"
#include "08_tensor_core_backward/ladder/v6_two_key_blocks.cuh"
#include "08_tensor_core_backward/ladder/v7_named_barrier.cuh"
#include "fa/cuda/check.cuh"
#include "fa/cuda/shared_memory.cuh"

namespace fa::step08::ladder {

namespace {

// The rungs run D = 64 and 128: the ladder's measurements are made there.
void require_rung_dim(const Problem& p, const char* name) {
  if (p.dim != 64 && p.dim != 128)
    throw UsageError(std::string("stage 08 ") + name + " runs D = 64 and 128 (the stage's kernel, flash, runs " +
                     "32, 64, 96, 128, 256), not D = " + std::to_string(p.dim));
}

// One launch of a rung's key-tile kernel: one block per (head, tile of kBc keys), the grid's fast
// axis the heads.
template <class T, auto kKernel, int kThreads, int kBc, int kSmemBytes>
void launch_kernel(const char* name, const Problem& p, const BackwardArgs<T>& args, DeviceContext& ctx) {
  opt_in_shared_memory_once<kKernel, kSmemBytes>();
  const dim3 grid(static_cast<unsigned>(p.heads_total()), static_cast<unsigned>((p.seq_k + kBc - 1) / kBc));
  ctx.kernel_begin(name);
  kKernel<<<grid, kThreads, kSmemBytes, ctx.stream>>>(args);
  FA_CUDA_CHECK_LAUNCH();
  ctx.kernel_end(name);
}
template <class T, class C, auto kKernel>
void launch_config(const char* name, const Problem& p, const BackwardArgs<T>& args, DeviceContext& ctx) {
  launch_kernel<T, kKernel, C::kThreads, C::kBc, C::kSmemBytes>(name, p, args, ctx);
}

// v5: 8 warps of 16 keys and query tiles of 64, as v1 .. v4 have.
template <int D>
using V5 = V5Config<D, kRungWarps, 1>;
static_assert(V5<64>::kBc == kRungBc && V5<64>::kBr == kRungBr, "v5 has the lower rungs' tile");
// v6 and v7: the stage's shapes (tensor_core_backward.cu). D = 64: 4 warps of 32 keys, query tiles
// of 32, two blocks per SM. D = 128: 8 warps, a pair per 32 keys, query tiles of 64, dQ in blocks
// of 32 queries, one block per SM.
template <int D>
using V6 = std::conditional_t<D == 64, V6Config<64, 4, 2, 2, 32>, V6Config<128, 8, 1, 2, 64, 2, 2>>;
template <int D>
using V7 = std::conditional_t<D == 64, V7Config<64, 4, 2, 2, 32>, V7Config<128, 8, 1, 2, 64, 2, 2>>;

template <class T>
void v1_launch(const Problem& p, const BackwardArgs<T>& a, DeviceContext& ctx) {
  if (p.dim == 64) launch_kernel<T, v1_mma_kernel<T, 64>, 32 * kRungWarps, kRungBc, V1<64>::kSmemBytes>("v1_mma", p, a, ctx);
  else launch_kernel<T, v1_mma_kernel<T, 128>, 32 * kRungWarps, kRungBc, V1<128>::kSmemBytes>("v1_mma", p, a, ctx);
}
template <class T>
void v2_launch(const Problem& p, const BackwardArgs<T>& a, DeviceContext& ctx) {
  if (p.dim == 64)
    launch_kernel<T, v2_ldmatrix_kernel<T, 64>, 32 * kRungWarps, kRungBc, V2<64>::kSmemBytes>("v2_ldmatrix", p, a, ctx);
  else
    launch_kernel<T, v2_ldmatrix_kernel<T, 128>, 32 * kRungWarps, kRungBc, V2<128>::kSmemBytes>("v2_ldmatrix", p, a, ctx);
}
template <class T>
void v3_launch(const Problem& p, const BackwardArgs<T>& a, DeviceContext& ctx) {
  if (p.dim == 64)
    launch_kernel<T, v3_cp_async_kernel<T, 64>, 32 * kRungWarps, kRungBc, V3<64>::kSmemBytes>("v3_cp_async", p, a, ctx);
  else
    launch_kernel<T, v3_cp_async_kernel<T, 128>, 32 * kRungWarps, kRungBc, V3<128>::kSmemBytes>("v3_cp_async", p, a, ctx);
}
template <class T>
void v4_launch(const Problem& p, const BackwardArgs<T>& a, DeviceContext& ctx) {
  if (p.dim == 64)
    launch_kernel<T, v4_registers_kernel<T, 64>, 32 * kRungWarps, kRungBc, V4<64>::kSmemBytes>("v4_registers", p, a, ctx);
  else
    launch_kernel<T, v4_registers_kernel<T, 128>, 32 * kRungWarps, kRungBc, V4<128>::kSmemBytes>("v4_registers", p, a,
                                                                                                   ctx);
}
template <class T>
void v5_launch(const Problem& p, const BackwardArgs<T>& a, DeviceContext& ctx) {
  if (p.dim == 64) launch_config<T, V5<64>, v5_whole_tiles_kernel<T, V5<64>>>("v5_whole_tiles", p, a, ctx);
  else launch_config<T, V5<128>, v5_whole_tiles_kernel<T, V5<128>>>("v5_whole_tiles", p, a, ctx);
}
template <class T>
void v6_launch(const Problem& p, const BackwardArgs<T>& a, DeviceContext& ctx) {
  if (p.dim == 64) launch_config<T, V6<64>, v6_two_key_blocks_kernel<T, V6<64>>>("v6_two_key_blocks", p, a, ctx);
  else launch_config<T, V6<128>, v6_two_key_blocks_kernel<T, V6<128>>>("v6_two_key_blocks", p, a, ctx);
}
template <class T>
void v7_launch(const Problem& p, const BackwardArgs<T>& a, DeviceContext& ctx) {
  if (p.dim == 64) launch_config<T, V7<64>, v7_named_barrier_kernel<T, V7<64>>>("v7_named_barrier", p, a, ctx);
  else launch_config<T, V7<128>, v7_named_barrier_kernel<T, V7<128>>>("v7_named_barrier", p, a, ctx);
}

}  // namespace

void v1_mma(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse, ConstTensorView d_o,
            const AttentionGradients& grads, DeviceContext& ctx) {
  require_rung_dim(p, "v1_mma");
  attention_backward_with(p, in, o, lse, d_o, grads, ctx, {&v1_launch<__nv_bfloat16>, &v1_launch<__half>});
}
void v2_ldmatrix(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse,
                 ConstTensorView d_o, const AttentionGradients& grads, DeviceContext& ctx) {
  require_rung_dim(p, "v2_ldmatrix");
  attention_backward_with(p, in, o, lse, d_o, grads, ctx, {&v2_launch<__nv_bfloat16>, &v2_launch<__half>});
}
void v3_cp_async(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse,
                 ConstTensorView d_o, const AttentionGradients& grads, DeviceContext& ctx) {
  require_rung_dim(p, "v3_cp_async");
  attention_backward_with(p, in, o, lse, d_o, grads, ctx, {&v3_launch<__nv_bfloat16>, &v3_launch<__half>});
}
void v4_registers(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse,
                  ConstTensorView d_o, const AttentionGradients& grads, DeviceContext& ctx) {
  require_rung_dim(p, "v4_registers");
  attention_backward_with(p, in, o, lse, d_o, grads, ctx, {&v4_launch<__nv_bfloat16>, &v4_launch<__half>});
}
void v5_whole_tiles(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse,
                    ConstTensorView d_o, const AttentionGradients& grads, DeviceContext& ctx) {
  require_rung_dim(p, "v5_whole_tiles");
  attention_backward_with(p, in, o, lse, d_o, grads, ctx, {&v5_launch<__nv_bfloat16>, &v5_launch<__half>});
}
void v6_two_key_blocks(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse,
                       ConstTensorView d_o, const AttentionGradients& grads, DeviceContext& ctx) {
  require_rung_dim(p, "v6_two_key_blocks");
  attention_backward_with(p, in, o, lse, d_o, grads, ctx, {&v6_launch<__nv_bfloat16>, &v6_launch<__half>});
}
void v7_named_barrier(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse,
                      ConstTensorView d_o, const AttentionGradients& grads, DeviceContext& ctx) {
  require_rung_dim(p, "v7_named_barrier");
  attention_backward_with(p, in, o, lse, d_o, grads, ctx, {&v7_launch<__nv_bfloat16>, &v7_launch<__half>});
}
void flash(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse, ConstTensorView d_o,
           const AttentionGradients& grads, DeviceContext& ctx) {
  attention_backward(p, in, o, lse, d_o, grads, ctx, {});
}

}  // namespace fa::step08::ladder
