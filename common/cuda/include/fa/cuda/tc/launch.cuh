// launch.cuh — the host side every stage-07 kernel shares (the stage's and the ladder's): the
// checks of a problem against a kernel, and one launch on the grid (B·H heads, Q tiles).
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <string>

#include "fa/cuda/tc/tile_ops.cuh"
#include "fa/cuda/check.cuh"
#include "fa/cuda/dtype.cuh"
#include "fa/cuda/shared_memory.cuh"
#include "fa/cuda/stage_gpu.cuh"

namespace fa::tc {

// One line (a UsageError, exit 2) for what a kernel of `rows` query rows and `smem` bytes cannot
// run here: the grid's y holds the Q tiles (at most 65535), indices are 32-bit, the kernel moves
// 16-byte chunks, and its shared memory must fit what this GPU gives a block.
inline void check_launch(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, const std::string& who,
                         int rows, long long smem) {
  if ((p.seq_q + rows - 1) / rows > 65535)
    throw UsageError(who + ": Nq = " + std::to_string(p.seq_q) + " is too long (at most " +
                     std::to_string(65535LL * rows) + ")");
  if (p.seq_k > INT_MAX / 2 || p.seq_q > INT_MAX / 2 || p.heads_total() > INT_MAX)
    throw UsageError(who + ": Nq, Nk or B·H is too large for 32-bit indices");
  if (!aligned16(in.q.data) || !aligned16(in.k.data) || !aligned16(in.v.data) || !aligned16(out.o.data))
    throw UsageError(who + ": Q, K, V and O must be 16-byte aligned (the kernel moves 16-byte chunks)");
  if (const std::string refusal = shared_memory_refusal(smem, who + " at D = " + std::to_string(p.dim)); !refusal.empty())
    throw UsageError(refusal);
}

// One launch of `kernel` (a stage-07 kernel instantiated for T): `threads` per block, `rows` query
// rows per block, `smem` bytes of dynamic shared memory (asked for once: above 48 KiB a kernel must
// opt in). The grid is (B·H, Q tiles): the blocks of one Q tile index, for every head, start
// before the next index, which is what lets the kernel start the heaviest causal tiles first.
template <class T, auto kernel, int threads, int rows, int smem>
void launch(const char* name, const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
            DeviceContext& ctx, bool heavy_first = true) {
  check_launch(p, in, out, std::string("stage 07 ") + name, rows, smem);
  opt_in_shared_memory_once<kernel, smem>();
  const float scale = p.softmax_scale();
  const KernelArgs<T> a{in.q.as<T>(), in.k.as<T>(), in.v.as<T>(), out.o.as<T>(), out.lse.as<float>(),
                        static_cast<int>(p.seq_q), static_cast<int>(p.seq_k), scale,
                        scale * static_cast<float>(M_LOG2E), p.causal, heavy_first && p.causal};
  const dim3 grid(static_cast<unsigned>(p.heads_total()), static_cast<unsigned>((p.seq_q + rows - 1) / rows));
  ctx.kernel_begin(name);
  kernel<<<grid, threads, smem, ctx.stream>>>(a);
  FA_CUDA_CHECK_LAUNCH();
  ctx.kernel_end(name);
}

}  // namespace fa::tc
