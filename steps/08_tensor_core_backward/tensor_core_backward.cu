// Stage 08 — the host side: the problem's checks, the tile shape of each head dim, the launches:
// preprocessing, the key-tile kernel, dQ's conversion (or, --deterministic, the key-tile kernel
// without dQ and the dQ kernel). The preprocessing and the conversion are the frame that stage 10
// shares: fa/cuda/backward/frame.cuh.
//
// What changed from stage 06 (steps/06_cuda_backward/flash_backward.cu): fp16/bf16 instead of
// float32 (a template parameter T), the tensor-core kernel, and a float32 dQ accumulator beside
// the 16-bit dQ (stage 06 accumulated into its float32 dQ directly).
//
// Build and run (verifies against float64 with the 16-bit rule, beside stage 06 in float32):
//   cmake -S . -B build -G Ninja && cmake --build build --target step08_tensor_core_backward
//   build/steps/08_tensor_core_backward/step08_tensor_core_backward              (--help for the flags)
#include "08_tensor_core_backward/tensor_core_backward.cuh"

#include <climits>
#include <cmath>
#include <cstdint>

#include "07_tensor_cores/tensor_cores.cuh"
#include "08_tensor_core_backward/backward_dq_kernel.cuh"
#include "08_tensor_core_backward/backward_tc_kernel.cuh"
#include "fa/cuda/backward/frame.cuh"
#include "fa/cuda/check.cuh"
#include "fa/cuda/device.cuh"
#include "fa/cuda/dtype.cuh"
#include "fa/cuda/nvtx.cuh"
#include "fa/cuda/shared_memory.cuh"
#include "fa/cuda/stage_arch.cuh"

namespace fa::step08 {

namespace {

// The tile shape per head dim and mask (docs/results/step08_tune_h100.txt). Every warp's dK and dV
// stay in registers: 16·kKeyBlocks keys × D columns, two accumulators each (in a pair, one each).
// - D = 64: warps of 32 keys with query tiles of 32, so that each Q/dO fragment read from shared
//   memory feeds two key blocks: 1.14-1.23x the warps of 16 keys with query tiles of 64. 4 warps,
//   two blocks per SM (Bc = 128).
// - D = 128: warps of 32 keys would need 256 accumulators; two warps share each 32 keys instead,
//   and dQ goes in blocks of 32 queries: 1.04-1.08x the warps of 16 keys (the pair then divided the
//   queries and the columns of D). The pair divides the products since (Sᵀ, Pᵀ, dV in one warp;
//   dPᵀ, dSᵀ, dK in the other): 1.00-1.10x that, in one run (step08_pairing_h100.txt); with dSᵀ
//   signalled on a named barrier, 1.03-1.04x that at 16k keys (step08_named_barriers_h100.txt).
//   8 warps, Bc = 128, one block per SM; 4 warps (Bc = 64, two blocks): 0.52-0.81x.
// - D = 256: a pair per 16 keys, Bc = 64: correct, not tuned (dividing the products measured
//   1.01-1.05x dividing the columns).
// - D = 32, 96: 8 warps of 16 keys, query tiles of 64 (correct, not tuned).
// And the grid order, from how many keys on (key_tiles_first_from): a head's key tiles on the grid's
// fast axis, so that the blocks running at once share one head's Q, dO and dQ in L2, or the heads.
// In one run of step08_tune at 4k / 8k / 16k keys, the key tiles first against the heads first:
// - D = 64 without the mask: always (1.02 / 1.08 / 1.04x);
// - D = 64 causal: never (1.00 / 1.04 / 1.01x here, but the whole backward at 16k measured 275
//   TFLOP/s with the key tiles first against 288 with the heads first, in two runs);
// - D = 128 without the mask: always (1.08 / 1.04 / 1.03x, step08_pairing_h100.txt; at 4k the
//   whole backward with the named barrier, 1.03-1.05x, step08_named_barriers_h100.txt);
// - D = 128 causal: from 16k keys on (0.92 / 0.97 / 1.04x).
constexpr std::int64_t kNever = INT64_MAX;
template <int D, bool kCausal>
struct StageConfigOf {
  using type = BackwardConfig<D, 8, 1>;  // Bc = 128, Br = 64
  static constexpr std::int64_t key_tiles_first_from = kNever;
};
template <bool kCausal>
struct StageConfigOf<128, kCausal> {
  using type = BackwardConfig<128, 8, 1, 2, 64, 2, 2>;  // Bc = 128, Br = 64, a pair of warps per 32 keys
  static constexpr std::int64_t key_tiles_first_from = kCausal ? 16384 : 0;
};
template <bool kCausal>
struct StageConfigOf<256, kCausal> {
  using type = BackwardConfig<256, 8, 1, 1, 64, 2, 2>;  // Bc = 64, Br = 64, a pair of warps per 16 keys
  static constexpr std::int64_t key_tiles_first_from = kNever;
};
template <>
struct StageConfigOf<64, false> {
  using type = BackwardConfig<64, 4, 2, 2, 32>;  // Bc = 128, Br = 32
  static constexpr std::int64_t key_tiles_first_from = 0;
};
template <>
struct StageConfigOf<64, true> {
  using type = BackwardConfig<64, 4, 2, 2, 32>;  // Bc = 128, Br = 32
  static constexpr std::int64_t key_tiles_first_from = kNever;
};
template <int D, bool kCausal>
using StageConfig = typename StageConfigOf<D, kCausal>::type;

// The deterministic dQ kernel's shape: 4 warps of 16 queries, key tiles of 64, two blocks per SM
// (D = 256: one, for the registers of its 16 × 256 dQ).
template <int D>
using DqStageConfig = DqConfig<D, 4, 64, D == 256 ? 1 : 2>;

template <class T, int D, bool kCausal>
void launch_with(const Problem& p, BackwardArgs<T> args, DeviceContext& ctx, T* dq_deterministic) {
  using C = StageConfig<D, kCausal>;
  static_assert(bwd::kRowPadding % C::kBr == 0, "the per-row arrays are padded to whole query tiles");
  args.key_tiles_first = p.seq_k >= StageConfigOf<D, kCausal>::key_tiles_first_from;
  const dim3 grid = C::grid(p.heads_total(), p.seq_k, args.key_tiles_first);
  if (dq_deterministic) {
    constexpr auto kernel = backward_tc_kernel<T, C, false>;
    opt_in_shared_memory_once<kernel, C::kSmemBytes>();
    ctx.kernel_begin("dkdv");
    kernel<<<grid, C::kThreads, C::kSmemBytes, ctx.stream>>>(args);
    FA_CUDA_CHECK_LAUNCH();
    ctx.kernel_end("dkdv");
    using Q = DqStageConfig<D>;
    constexpr auto dq_kernel = backward_dq_kernel<T, Q>;
    opt_in_shared_memory_once<dq_kernel, Q::kSmemBytes>();
    const dim3 dq_grid(static_cast<unsigned>(p.heads_total()), static_cast<unsigned>((p.seq_q + Q::kBr - 1) / Q::kBr));
    ctx.kernel_begin("dq");
    dq_kernel<<<dq_grid, Q::kThreads, Q::kSmemBytes, ctx.stream>>>(args, dq_deterministic);
    FA_CUDA_CHECK_LAUNCH();
    ctx.kernel_end("dq");
    return;
  }
  constexpr auto kernel = backward_tc_kernel<T, C>;
  opt_in_shared_memory_once<kernel, C::kSmemBytes>();
  ctx.kernel_begin("dkdv+dq");
  kernel<<<grid, C::kThreads, C::kSmemBytes, ctx.stream>>>(args);
  FA_CUDA_CHECK_LAUNCH();
  ctx.kernel_end("dkdv+dq");
}

template <class T, int D>
void launch(const Problem& p, const BackwardArgs<T>& args, DeviceContext& ctx, T* dq_deterministic) {
  if (p.causal)
    launch_with<T, D, true>(p, args, ctx, dq_deterministic);
  else
    launch_with<T, D, false>(p, args, ctx, dq_deterministic);
}

// key_tiles: nullptr, the stage's key-tile kernel at p.dim; else the ladder's rung in its place.
template <class T>
void backward(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse, ConstTensorView d_o,
              const AttentionGradients& grads, DeviceContext& ctx, bool deterministic,
              void (*key_tiles)(const Problem&, const BackwardArgs<T>&, DeviceContext&) = nullptr) {
  NvtxRange range("step08/backward");
  const BackwardArgs<T> args = bwd::prepare_backward<T>(p, in, o, lse, d_o, grads, ctx, !deterministic);
  T* dq_out = deterministic ? grads.dq.as<T>() : nullptr;
  if (key_tiles) {
    key_tiles(p, args, ctx);
  } else switch (p.dim) {
    case 32: launch<T, 32>(p, args, ctx, dq_out); break;
    case 64: launch<T, 64>(p, args, ctx, dq_out); break;
    case 96: launch<T, 96>(p, args, ctx, dq_out); break;
    case 256: launch<T, 256>(p, args, ctx, dq_out); break;
    default: launch<T, 128>(p, args, ctx, dq_out); break;
  }
  if (!deterministic) bwd::finish_atomic_dq<T>(p, args, grads, ctx);
}

// The largest shared memory of the kernels at D (the key-tile kernel's, at every D here).
template <int D>
long long smem_of() {
  long long most = DqStageConfig<D>::kSmemBytes;
  for (const long long bytes : {StageConfig<D, false>::kSmemBytes, StageConfig<D, true>::kSmemBytes})
    most = bytes > most ? bytes : most;
  return most;
}
long long smem_at(std::int64_t dim) {
  switch (dim) {
    case 32: return smem_of<32>();
    case 64: return smem_of<64>();
    case 96: return smem_of<96>();
    case 256: return smem_of<256>();
    default: return smem_of<128>();
  }
}

}  // namespace

void attention_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx) {
  step07::attention_forward(p, in, out, ctx);
}

std::string device_refusal(const Problem& p) {
  if (!cuda_skip_reason(kStageMinComputeCapability).empty()) return "";  // the harness skips
  if (!kSupports.has_dim(p.dim)) return "";  // the CLI refuses it
  if (std::string why = step07::device_refusal(p); !why.empty()) return why;
  return shared_memory_refusal(smem_at(p.dim), "stage 08's backward kernel at D = " + std::to_string(p.dim));
}

namespace {

// The problem's checks, one line each (UsageError): what neither kernel nor launch can run.
void check_problem(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView d_o,
                   const AttentionGradients& grads) {
  p.require(kSupports);
  if (p.kv_heads() != p.heads) throw UsageError("stage 08 runs Hkv = Hq only (grouped heads: stage 11)");
  if ((p.seq_k + 63) / 64 > 65535 || p.heads_total() > 65535 || p.seq_q > INT_MAX / 2 || p.seq_k > INT_MAX / 2)
    throw UsageError("stage 08: B·H and Nk / 64 (the grid) are at most 65535 each, and Nq, Nk fit 32-bit indices");
  if (const std::string refusal = shared_memory_refusal(smem_at(p.dim), "stage 08's backward kernel at D = " +
                                                                            std::to_string(p.dim));
      !refusal.empty())
    throw UsageError(refusal);
  if (!bwd::backward_tensors_aligned16(in, o, d_o, grads))
    throw UsageError("stage 08: every tensor must be 16-byte aligned (16-byte copies)");
}

}  // namespace

void attention_backward(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse,
                        ConstTensorView d_o, const AttentionGradients& grads, DeviceContext& ctx,
                        const BackwardOptions& options) {
  check_problem(p, in, o, d_o, grads);
  if (p.dtype == DType::float16)
    backward<__half>(p, in, o, lse, d_o, grads, ctx, options.deterministic);
  else
    backward<__nv_bfloat16>(p, in, o, lse, d_o, grads, ctx, options.deterministic);
}

void attention_backward_with(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse,
                             ConstTensorView d_o, const AttentionGradients& grads, DeviceContext& ctx,
                             const KeyTileLaunch& launch) {
  check_problem(p, in, o, d_o, grads);
  if (p.dtype == DType::float16)
    backward<__half>(p, in, o, lse, d_o, grads, ctx, false, launch.fp16);
  else
    backward<__nv_bfloat16>(p, in, o, lse, d_o, grads, ctx, false, launch.bf16);
}

}  // namespace fa::step08
