// Stage 03 — attention as three CUDA kernels, S and P materialized in device memory.
//
// Stage 01 wrote attention as the paper does and stage 02 tiled it on the CPU. This stage moves
// stage 01's three steps, unchanged, onto the GPU, one kernel each:
//
//   S = τ · Q Kᵀ             [B, H, Nq, Nk]   kernel "qk"       τ = softmax scale (1/√D by default)
//   P = softmax(S) by rows   [B, H, Nq, Nk]   kernel "softmax"  (row_softmax.cuh; also LSE = m + log l)
//   O = P V                  [B, H, Nq, D]    kernel "pv"
//
// and, beside them, what a practitioner writes first: the two matrix products as
// cublasSgemmStridedBatched calls around the same softmax kernel (attention_forward_cublas).
//
// What it costs: S and P are two [Nq, Nk] float32 matrices per head, written and read through
// device memory. At B·N = 16384 tokens, H = 32, N = 4096 they are 8.6 GB each, against 0.5 GB for
// Q, K, V and O together: the bytes moved grow as N², the bytes needed as N. docs/03_cuda_naive.md
// counts them and shows why this makes even the cuBLAS version memory-bound on the softmax.
//
// Build and run (the default sweep verifies against stage 02 on the CPU and charts both):
//   cmake -S . -B build -G Ninja && cmake --build build --target step03_cuda_naive
//   build/steps/03_cuda_naive/step03_cuda_naive                  (--help for the flags)
//   build/steps/03_cuda_naive/step03_cuda_naive --find-oom --batch 1 --heads 32 --dim 64 --sweep 1024
//
// What changed from stage 02: the online softmax is gone again. Stage 02 never held S; here the
// whole of S and P live in device memory, because three separate kernels can only hand each other
// data through memory. Stage 04 fuses them back into one kernel with stage 02's online softmax.
//
// Known limits, on purpose:
// - The matrix-product kernels are the textbook shared-memory tiling (one output per thread,
//   32 x 32 tiles): correct for any shape, a few TFLOP/s, far below cuBLAS. Stage 07 is about
//   fast matrix products; here they are not the lesson.
// - Causal: QKᵀ computes the masked scores too and PV multiplies their zeros; the softmax masks.
//   Skipping the masked tiles is stage 05.
// - float32 only; B·H ≤ 65535 and Nq ≤ 2 097 120 (grid limits), checked with a clear message.
#include "naive_attention.cuh"

#include <cublas_v2.h>

#include <cstdint>
#include <string>

#include "fa/cuda/check.cuh"
#include "fa/cuda/cublas_check.cuh"
#include "fa/cuda/nvtx.cuh"
#include "row_softmax.cuh"

namespace fa::step03 {

namespace {

constexpr int kTile = 32;  // output tile: 32 x 32 elements, one per thread of a 32 x 32 block

// The grid of 32 x 32 output tiles, heads along z. CUDA caps grid.y and grid.z at 65535.
dim3 tile_grid(std::int64_t rows, std::int64_t cols, std::int64_t heads) {
  const std::int64_t ty = (rows + kTile - 1) / kTile, tx = (cols + kTile - 1) / kTile;
  if (heads > 65535) throw UsageError("B·H = " + std::to_string(heads) + " heads: stage 03 handles at most 65535");
  if (ty > 65535) throw UsageError("N = " + std::to_string(rows) + ": stage 03 handles at most 2097120 query rows");
  return dim3(static_cast<unsigned>(tx), static_cast<unsigned>(ty), static_cast<unsigned>(heads));
}

// ---- kernel 1: S = τ · Q Kᵀ ----------------------------------------------------------------------
//
// Block (bx, by, bh) computes the 32 x 32 tile of S with rows i0 = 32·by.. and keys j0 = 32·bx..
// of head bh. Thread (tx, ty) owns S[i0 + ty, j0 + tx]. The D axis is walked 32 columns at a time:
//
//            D ─►  d0 .. d0+31                       j0 .. j0+31
//          ┌────────┬────────┐                    ┌───────────────┐
//   Q  i0  │        │ Q_tile │ 32 rows     S  i0  │  · · · · · ·  │  S[i0+ty, j0+tx] =
//          └────────┴────────┘                    │  · · ·(ty,tx) │    τ · Σ_d Q_tile[ty, d]
//   K  j0  │        │ K_tile │ 32 keys            │  · · · · · ·  │          · K_tile[tx, d]
//          └────────┴────────┘                    └───────────────┘
//
// Both tiles are loaded row by row (thread tx reads column d0 + tx: coalesced). In the product
// loop all 32 threads of a warp (same ty, tx = 0..31) read the same Q_tile[ty][d] (a broadcast) and
// K_tile[0..31][d]: a column of the K tile. With rows of 32 floats a column sits in one bank (32
// threads, one bank: 32-way conflict); a row of 33 floats puts element [tx][d] in bank (tx + d) % 32:
// no conflict. Every load past Nq, Nk or D reads a 0 instead (the tails of all three axes).
__global__ void __launch_bounds__(kTile * kTile)
qk_kernel(const float* __restrict__ q, const float* __restrict__ k, float* __restrict__ s, std::int64_t nq,
          std::int64_t nk, std::int64_t d, float scale) {
  __shared__ float q_tile[kTile][kTile + 1];
  __shared__ float k_tile[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const std::int64_t bh = blockIdx.z;
  const std::int64_t i0 = static_cast<std::int64_t>(blockIdx.y) * kTile;
  const std::int64_t j0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
  const float* q_head = q + bh * nq * d;
  const float* k_head = k + bh * nk * d;

  float acc = 0.0f;
  for (std::int64_t d0 = 0; d0 < d; d0 += kTile) {
    const std::int64_t col = d0 + tx;
    q_tile[ty][tx] = (i0 + ty < nq && col < d) ? q_head[(i0 + ty) * d + col] : 0.0f;
    k_tile[ty][tx] = (j0 + ty < nk && col < d) ? k_head[(j0 + ty) * d + col] : 0.0f;
    __syncthreads();  // the tiles are complete before anyone reads them
#pragma unroll
    for (int dd = 0; dd < kTile; ++dd) acc += q_tile[ty][dd] * k_tile[tx][dd];
    __syncthreads();  // everyone is done with the tiles before the next step overwrites them
  }
  const std::int64_t i = i0 + ty, j = j0 + tx;
  if (i < nq && j < nk) s[(bh * nq + i) * nk + j] = scale * acc;  // 64-bit index: S passes 2³¹ soon
}

// ---- kernel 3: O = P V -----------------------------------------------------------------------------
//
// Block (bx, by, bh) computes the 32 x 32 tile of O with rows i0 = 32·by.. and columns d0 = 32·bx..
// (D = 16: half a tile, the rest guarded; D = 128: four blocks across D). Thread (tx, ty) owns
// O[i0 + ty, d0 + tx]. The key axis is walked 32 keys at a time:
//
//            keys ─►  j0 .. j0+31                        d0 .. d0+31
//          ┌────────┬────────┐                       ┌──────────┐
//   P  i0  │        │ P_tile │ 32 rows     V   j0    │  V_tile  │ 32 keys
//          └────────┴────────┘                       └──────────┘
//          O[i0+ty, d0+tx] = Σ_j P_tile[ty, j] · V_tile[j, tx]
//
// A warp reads P_tile[ty][j] (one address: a broadcast) and V_tile[j][0..31] (one row: 32 banks).
// Masked keys have P = 0 and are multiplied all the same (the naive part). Loads past Nq, Nk or D
// read 0.
__global__ void __launch_bounds__(kTile * kTile)
pv_kernel(const float* __restrict__ pr, const float* __restrict__ v, float* __restrict__ o, std::int64_t nq,
          std::int64_t nk, std::int64_t d) {
  __shared__ float p_tile[kTile][kTile + 1];
  __shared__ float v_tile[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const std::int64_t bh = blockIdx.z;
  const std::int64_t i0 = static_cast<std::int64_t>(blockIdx.y) * kTile;
  const std::int64_t d0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
  const float* p_head = pr + bh * nq * nk;
  const float* v_head = v + bh * nk * d;

  float acc = 0.0f;
  for (std::int64_t j0 = 0; j0 < nk; j0 += kTile) {
    p_tile[ty][tx] = (i0 + ty < nq && j0 + tx < nk) ? p_head[(i0 + ty) * nk + j0 + tx] : 0.0f;
    v_tile[ty][tx] = (j0 + ty < nk && d0 + tx < d) ? v_head[(j0 + ty) * d + d0 + tx] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int jj = 0; jj < kTile; ++jj) acc += p_tile[ty][jj] * v_tile[jj][tx];
    __syncthreads();
  }
  const std::int64_t i = i0 + ty, col = d0 + tx;
  if (i < nq && col < d) o[(bh * nq + i) * d + col] = acc;
}

// ---- the scratch matrices ----------------------------------------------------------------------------
// S and P come from the context, so the meter counts them (they are nearly all of this stage's
// memory) and the timed repetitions reuse them instead of calling cudaMalloc each time.
struct Scratch {
  float* s;
  float* pr;
};
Scratch scores_and_probabilities(const Problem& p, DeviceContext& ctx) {
  const auto n = static_cast<std::size_t>(p.heads_total() * p.seq_q * p.seq_k);
  return {ctx.scratch_as<float>("S", n), ctx.scratch_as<float>("P", n)};
}

// ---- cuBLAS ----------------------------------------------------------------------------------------
// One handle for the process, made on the first call. The harness's first call is its untimed,
// verified run, so creating the handle (tens of ms) never lands in a timed repetition. It is never
// destroyed on purpose: a static's destructor would run after the CUDA runtime has shut down.
cublasHandle_t cublas_handle() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    FA_CUBLAS_CHECK(cublasCreate(&h));
    // CUBLAS_DEFAULT_MATH: SGEMM in true float32 (FFMA on the CUDA cores). TF32 tensor cores
    // (10-bit mantissa, errors near 1e-3) would need CUBLAS_TF32_TENSOR_OP_MATH, and the BF16x9
    // emulation CUBLAS_FP32_EMULATED_BF16X9_MATH; we ask for neither. Not PEDANTIC_MATH: that mode
    // may pick slower "standardized" algorithms for debugging, and the anchor we compare with
    // (float32 matrix product, TF32 off: 51.5 TFLOP/s) is the default mode's.
    FA_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    return h;
  }();
  return handle;
}
constexpr std::size_t kCublasWorkspaceBytes = 32u << 20;  // what NVIDIA recommends on Hopper

}  // namespace

void launch_qk(const Problem& p, const float* q, const float* k, float* s, cudaStream_t stream) {
  qk_kernel<<<tile_grid(p.seq_q, p.seq_k, p.heads_total()), dim3(kTile, kTile), 0, stream>>>(
      q, k, s, p.seq_q, p.seq_k, p.dim, p.softmax_scale());
}

void launch_softmax(const Problem& p, const float* s, float* pr, float* lse, cudaStream_t stream) {
  launch_row_softmax(p, s, pr, lse, stream);
}

void launch_pv(const Problem& p, const float* pr, const float* v, float* o, cudaStream_t stream) {
  pv_kernel<<<tile_grid(p.seq_q, p.dim, p.heads_total()), dim3(kTile, kTile), 0, stream>>>(pr, v, o, p.seq_q,
                                                                                        p.seq_k, p.dim);
}

void attention_forward_naive(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                             DeviceContext& ctx) {
  const Scratch sc = scores_and_probabilities(p, ctx);
  {
    NvtxRange range("step03/qk");
    ctx.kernel_begin("qk");
    launch_qk(p, in.q.as<float>(), in.k.as<float>(), sc.s, ctx.stream);
    FA_CUDA_CHECK_LAUNCH();
    ctx.kernel_end("qk");
  }
  {
    NvtxRange range("step03/softmax");
    ctx.kernel_begin("softmax");
    launch_softmax(p, sc.s, sc.pr, out.lse.as<float>(), ctx.stream);
    FA_CUDA_CHECK_LAUNCH();
    ctx.kernel_end("softmax");
  }
  {
    NvtxRange range("step03/pv");
    ctx.kernel_begin("pv");
    launch_pv(p, sc.pr, in.v.as<float>(), out.o.as<float>(), ctx.stream);
    FA_CUDA_CHECK_LAUNCH();
    ctx.kernel_end("pv");
  }
}

// cuBLAS is column-major: it reads an m x n matrix with leading dimension ld as element (r, c) at
// r + c·ld. Our row-major [rows, cols] matrix, read that way with ld = cols, is its transpose. So
// we never transpose anything in memory: we ask cuBLAS for the transpose of what we want,
//   S = τ Q Kᵀ  (row-major [Nq, Nk])  ⇔  Sᵀ = τ K Qᵀ  (column-major [Nk, Nq], ld = Nk)
//   O = P V     (row-major [Nq, D])   ⇔  Oᵀ = Vᵀ Pᵀ  (column-major [D, Nq],  ld = D)
// and read each of our row-major inputs as the column-major transpose it already is:
//   Q [Nq, D] row-major = Qᵀ [D, Nq] column-major, ld = D          (used as is: CUBLAS_OP_N)
//   K [Nk, D] row-major = Kᵀ [D, Nk] column-major, ld = D          (we need K: CUBLAS_OP_T)
//   V [Nk, D] row-major = Vᵀ [D, Nk] column-major, ld = D          (used as is: CUBLAS_OP_N)
//   P [Nq, Nk] row-major = Pᵀ [Nk, Nq] column-major, ld = Nk       (used as is: CUBLAS_OP_N)
// One strided-batched call covers all B·H heads: consecutive heads are a fixed stride apart.
void attention_forward_cublas(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                              DeviceContext& ctx) {
  const Scratch sc = scores_and_probabilities(p, ctx);
  cublasHandle_t h = cublas_handle();
  FA_CUBLAS_CHECK(cublasSetStream(h, ctx.stream));
  // cuBLAS's workspace from the context too, so that the meter counts it like S and P.
  FA_CUBLAS_CHECK(cublasSetWorkspace(h, ctx.scratch("cublas_workspace", kCublasWorkspaceBytes), kCublasWorkspaceBytes));
  const int nq = static_cast<int>(p.seq_q), nk = static_cast<int>(p.seq_k), d = static_cast<int>(p.dim);
  const int batch = static_cast<int>(p.heads_total());
  const long long stride_q = static_cast<long long>(nq) * d, stride_kv = static_cast<long long>(nk) * d;
  const long long stride_s = static_cast<long long>(nq) * nk;
  const float tau = p.softmax_scale(), one = 1.0f, zero = 0.0f;  // β = 0: S and O are not read
  {
    NvtxRange range("step03/qk");
    ctx.kernel_begin("qk");
    // Sᵀ[Nk, Nq] = τ · (Kᵀ)ᵀ[Nk, D] · Qᵀ[D, Nq]
    FA_CUBLAS_CHECK(cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, nk, nq, d, &tau, in.k.as<float>(), d, stride_kv,
                                              in.q.as<float>(), d, stride_q, &zero, sc.s, nk, stride_s, batch));
    ctx.kernel_end("qk");
  }
  {
    NvtxRange range("step03/softmax");
    ctx.kernel_begin("softmax");
    launch_softmax(p, sc.s, sc.pr, out.lse.as<float>(), ctx.stream);
    FA_CUDA_CHECK_LAUNCH();
    ctx.kernel_end("softmax");
  }
  {
    NvtxRange range("step03/pv");
    ctx.kernel_begin("pv");
    // Oᵀ[D, Nq] = Vᵀ[D, Nk] · Pᵀ[Nk, Nq]
    FA_CUBLAS_CHECK(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, d, nq, nk, &one, in.v.as<float>(), d, stride_kv,
                                              sc.pr, nk, stride_s, &zero, out.o.as<float>(), d, stride_q, batch));
    ctx.kernel_end("pv");
  }
}

}  // namespace fa::step03
