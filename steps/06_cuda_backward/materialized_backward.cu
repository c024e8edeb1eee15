// materialized_backward.cu — stage 06's comparison: the backward as the formulas read, with the
// N×N matrices in device memory. What a practitioner gets from autograd over the math path.
//
//   S  = Q Kᵀ                      cuBLAS SGEMM          scratch "S"  [B·H, Nq, Nk]
//   P  = exp(scale·S − LSE)        elementwise, in place (masked entries 0)
//   dV = Pᵀ dO                     cuBLAS
//   dP = dO Vᵀ                     cuBLAS                scratch "dP" [B·H, Nq, Nk]
//   dS = scale · P ∘ (dP − D)      elementwise, in place, D = delta = rowsum(dO ∘ O)
//   dQ = dS K,  dK = dSᵀ Q         cuBLAS
//
// Extra memory 2·B·H·Nq·Nk floats (plus delta): it grows as N², which is what the memory chart of
// the stage shows. cuBLAS runs with its default math (FP32 FMA, no TF32); its own small
// workspace is not on the meter (when cuBLAS cannot get it, FA_CUBLAS_CHECK reports out of memory).
#include <cublas_v2.h>

#include <string>

#include "fa/cuda/check.cuh"
#include "fa/cuda/cublas_check.cuh"
#include "fa/cuda/nvtx.cuh"
#include "flash_backward.cuh"

namespace fa::step06 {

namespace {

cublasHandle_t handle() {
  // One handle for the process (creating one costs milliseconds); never destroyed on purpose.
  static cublasHandle_t h = [] {
    cublasHandle_t made = nullptr;
    FA_CUBLAS_CHECK(cublasCreate(&made));
    FA_CUBLAS_CHECK(cublasSetMathMode(made, CUBLAS_DEFAULT_MATH));  // FP32 FMA; no TF32
    return made;
  }();
  return h;
}

// Row-major C[M×N] = op(A) op(B) (batched, strided), through cuBLAS's column-major view: a
// row-major X is a column-major Xᵀ, so we ask for Cᵀ = op(B)ᵀ op(A)ᵀ.
void gemm_rm(cudaStream_t stream, bool trans_a, bool trans_b, long long M, long long N, long long K, const float* A,
             long long lda, long long stride_a, const float* B, long long ldb, long long stride_b, float* C,
             long long ldc, long long stride_c, long long batch) {
  const float one = 1.0f, zero = 0.0f;
  FA_CUBLAS_CHECK(cublasSetStream(handle(), stream));
  FA_CUBLAS_CHECK(cublasSgemmStridedBatched(handle(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                            trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(N),
                                            static_cast<int>(M), static_cast<int>(K), &one, B, static_cast<int>(ldb),
                                            stride_b, A, static_cast<int>(lda), stride_a, &zero, C,
                                            static_cast<int>(ldc), stride_c, static_cast<int>(batch)));
}

__global__ void probabilities_kernel(float* s, const float* lse, long long rows, int nq, int nk, long long offset,
                                     bool causal, float scale) {
  const long long total = rows * nk;
  for (long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long row = idx / nk;
    const long long j = idx % nk;
    const long long i = row % nq;
    const bool seen = !causal || j <= i + offset;
    s[idx] = seen ? expf(scale * s[idx] - lse[row]) : 0.0f;
  }
}

__global__ void grad_scores_kernel(const float* pr, float* dp, const float* delta, long long rows, int nk,
                                   float scale) {
  const long long total = rows * nk;
  for (long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<long long>(gridDim.x) * blockDim.x)
    dp[idx] = scale * pr[idx] * (dp[idx] - delta[idx / nk]);
}

unsigned elementwise_blocks(long long total) {
  const long long blocks = (total + 255) / 256;
  return static_cast<unsigned>(blocks < 132LL * 64 ? blocks : 132LL * 64);
}

}  // namespace

void attention_backward_materialized(const Problem& p, const AttentionInputs& in, ConstTensorView o,
                                     ConstTensorView lse, ConstTensorView d_o, const AttentionGradients& grads,
                                     DeviceContext& ctx) {
  p.validate();
  if (p.kv_heads() != p.heads) throw UsageError("stage 06 runs Hkv = Hq only (no grouped heads)");
  // Raw float32 pointers for cuBLAS and the kernels (UsageError for any other dtype or layout).
  const float *q = in.q.as<float>(), *k = in.k.as<float>(), *v = in.v.as<float>();
  const float *o32 = o.as<float>(), *lse32 = lse.as<float>(), *d_o32 = d_o.as<float>();
  float *dq = grads.dq.as<float>(), *dk = grads.dk.as<float>(), *dv = grads.dv.as<float>();
  NvtxRange range("step06/materialized");
  const long long BH = p.heads_total(), Nq = p.seq_q, Nk = p.seq_k, D = p.dim;
  const long long rows = BH * Nq;
  const std::size_t nn = static_cast<std::size_t>(rows * Nk);
  float* s = ctx.scratch_as<float>("S", nn);   // S, then P in place
  float* dp = ctx.scratch_as<float>("dP", nn);  // dP, then dS in place
  float* delta = ctx.scratch_as<float>("delta", static_cast<std::size_t>(rows));
  const cudaStream_t st = ctx.stream;
  const float scale = p.softmax_scale();

  ctx.kernel_begin("delta");
  launch_delta(p, o32, d_o32, delta, st);
  ctx.kernel_end("delta");
  ctx.kernel_begin("S=QK^T");
  gemm_rm(st, false, true, Nq, Nk, D, q, D, Nq * D, k, D, Nk * D, s, Nk, Nq * Nk, BH);
  ctx.kernel_end("S=QK^T");
  ctx.kernel_begin("P");
  // Rows that see no key have LSE = −inf and every entry masked: P = 0, never exp(+inf).
  probabilities_kernel<<<elementwise_blocks(rows * Nk), 256, 0, st>>>(s, lse32, rows, static_cast<int>(Nq),
                                                                       static_cast<int>(Nk), Nk - Nq, p.causal, scale);
  FA_CUDA_CHECK_LAUNCH();
  ctx.kernel_end("P");
  ctx.kernel_begin("dV=P^T dO");
  gemm_rm(st, true, false, Nk, D, Nq, s, Nk, Nq * Nk, d_o32, D, Nq * D, dv, D, Nk * D, BH);
  ctx.kernel_end("dV=P^T dO");
  ctx.kernel_begin("dP=dO V^T");
  gemm_rm(st, false, true, Nq, Nk, D, d_o32, D, Nq * D, v, D, Nk * D, dp, Nk, Nq * Nk, BH);
  ctx.kernel_end("dP=dO V^T");
  ctx.kernel_begin("dS");
  grad_scores_kernel<<<elementwise_blocks(rows * Nk), 256, 0, st>>>(s, dp, delta, rows, static_cast<int>(Nk), scale);
  FA_CUDA_CHECK_LAUNCH();
  ctx.kernel_end("dS");
  ctx.kernel_begin("dQ=dS K");
  gemm_rm(st, false, false, Nq, D, Nk, dp, Nk, Nq * Nk, k, D, Nk * D, dq, D, Nq * D, BH);
  ctx.kernel_end("dQ=dS K");
  ctx.kernel_begin("dK=dS^T Q");
  gemm_rm(st, true, false, Nk, D, Nq, dp, Nk, Nq * Nk, q, D, Nq * D, dk, D, Nk * D, BH);
  ctx.kernel_end("dK=dS^T Q");
}

}  // namespace fa::step06
