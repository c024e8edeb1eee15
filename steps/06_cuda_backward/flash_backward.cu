// flash_backward.cu — stage 06: the backward pass by recomputation.
//
// What changed from stage 05: stage 05 computes O and LSE and keeps nothing N×N. This stage adds
// the backward. The forward's P is not stored (it would be N×N); the backward recomputes it tile
// by tile from Q, K and the saved LSE, exactly, with one exp per element:
//
//   delta_i = D_i = rowsum(dO ∘ O)_i                                 pre-pass, one warp per row
//   for each key tile j (one thread block), for each query tile i that sees it:
//     S_ij  = scale · Q_i K_jᵀ                                      recomputed
//     P_ij  = exp(S_ij − LSE_i)                                     recomputed, no max, no sum
//     dV_j += P_ijᵀ dO_i
//     dP_ij = dO_i V_jᵀ
//     dS_ij = P_ij ∘ (dP_ij − D_i)                                  (holes/backward_tile.cuh, ex06)
//     dK_j += scale · dS_ijᵀ Q_i
//     dQ_i += scale · dS_ij K_j    float atomics (default), or the dQ kernel below (deterministic)
//
// The tiles of the key-tile kernel (grid: key tiles × B·H; 256 threads, one 16×16 thread grid):
//
//        K_j, V_j  [Bc=64 × D] in shared memory for the whole block; dK_j, dV_j in registers
//        Q_i, dO_i [Br=64 × D] in shared memory, one query tile after the other
//
//        S, dP  (Br × Bc)          thread (ty, tx) owns rows 4ty..4ty+3, columns tx, tx+16, +32, +48
//        P, dS  (Br × Bc)          written to shared memory for the three products that follow
//        dV, dK (Bc × D)           thread owns keys 4ty..4ty+3, D/16 columns of the head dimension
//        dQ_i   (Br × D)           thread owns rows 4ty..4ty+3, the same D/16 columns
//
// Every product is a 64×64×D (or 64×D×64) SGEMM on tiles in shared memory, register-blocked so
// that each thread computes a 4×4 (4×D/16) block: per step of the inner dimension it loads 4+4
// (4 + D/16) values, mostly as 16-byte float4 loads, for 16 (4·D/16) FMAs. Rows of every
// shared-memory tile are padded by 4 floats, so that the float4 loads of 8 consecutive rows
// land in 8 different groups of banks.
//
// Build and run:  cmake --build build --target step06_cuda_backward && build/steps/06_cuda_backward/step06_cuda_backward
//
// Honest limits: float32 on CUDA cores only (tensor cores are stage 07); contiguous tensors and
// Hkv = Hq (no grouped heads); D ∈ {32, 64, 128} at compile time; dK/dV accumulate in registers,
// so D = 128 runs one block of 8 warps per SM; the Q/dO tiles are loaded synchronously (no
// cp.async pipeline); the default dQ is not bitwise reproducible (atomics), --deterministic is.
#include "flash_backward.cuh"

#include <cmath>
#include <string>

#include "fa/cuda/check.cuh"
#include "fa/cuda/device.cuh"
#include "fa/cuda/nvtx.cuh"
#include "fa/cuda/shared_memory.cuh"
#include "fa/cuda/stage_arch.cuh"

// Angle brackets on purpose: the exercise ex06 compiles this very file with its own folder first
// on the include path, so that the learner's backward_tile.cuh replaces the stage's.
#include <backward_tile.cuh>

#include "05_cuda_causal/flash_causal.cuh"

namespace fa::step06 {

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kLdTile = kBc + 4;  // padded row pitch of the Br × Bc tiles P and dS

template <int D>
constexpr int ld() {
  return D + 4;  // padded row pitch of the Br/Bc × D tiles
}
// Columns of the head dimension one thread owns in the × D products: D/16 of them.
template <int D>
constexpr int kTn = D / 16;

// The n-th head-dimension column of thread column tx: groups of 4 (float4) for D >= 64, pairs
// (float2) for D = 32. Consecutive tx read consecutive 16 (8) bytes: no bank conflict.
template <int D>
__device__ __forceinline__ int col_of(int n, int tx) {
  if constexpr (D >= 64)
    return 64 * (n / 4) + 4 * tx + n % 4;
  else
    return 2 * tx + n;
}

template <int D>
__device__ __forceinline__ void load_cols(const float* row, float (&out)[kTn<D>], int tx) {
  if constexpr (D >= 64) {
#pragma unroll
    for (int g = 0; g < D / 64; ++g) {
      const float4 v = *reinterpret_cast<const float4*>(row + 64 * g + 4 * tx);
      out[4 * g + 0] = v.x, out[4 * g + 1] = v.y, out[4 * g + 2] = v.z, out[4 * g + 3] = v.w;
    }
  } else {
    const float2 v = *reinterpret_cast<const float2*>(row + 2 * tx);
    out[0] = v.x, out[1] = v.y;
  }
}

// rows × D floats from global memory (row-major, D floats per row) into a padded shared tile;
// rows past `valid` are zero, so that tails need no special case in the products.
template <int D, int kRows>
__device__ __forceinline__ void load_tile(float* dst, const float* src, int valid) {
  constexpr int kVec = D / 4;
  for (int idx = threadIdx.x; idx < kRows * kVec; idx += kThreads) {
    const int r = idx / kVec, c4 = idx % kVec;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r < valid) v = __ldg(reinterpret_cast<const float4*>(src + static_cast<long long>(r) * D) + c4);
    *reinterpret_cast<float4*>(dst + r * ld<D>() + 4 * c4) = v;
  }
}

// S = Q_i K_jᵀ and dP = dO_i V_jᵀ, both Br × Bc, in one pass over the head dimension.
// Thread (ty, tx): rows 4ty+a, columns tx+16b. Per 4 steps of d: 16 float4 loads, 128 FMAs.
template <int D>
__device__ __forceinline__ void scores_and_dp(const float* sQ, const float* sK, const float* sdO, const float* sV,
                                              int ty, int tx, float (&s)[4][4], float (&dp)[4][4]) {
  constexpr int L = ld<D>();
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b) s[a][b] = dp[a][b] = 0.f;
#pragma unroll 2
  for (int d = 0; d < D; d += 4) {
    float4 q[4], g[4], k[4], v[4];
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      q[a] = *reinterpret_cast<const float4*>(sQ + (4 * ty + a) * L + d);
      g[a] = *reinterpret_cast<const float4*>(sdO + (4 * ty + a) * L + d);
    }
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      k[b] = *reinterpret_cast<const float4*>(sK + (tx + 16 * b) * L + d);
      v[b] = *reinterpret_cast<const float4*>(sV + (tx + 16 * b) * L + d);
    }
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        s[a][b] = fmaf(q[a].x, k[b].x, fmaf(q[a].y, k[b].y, fmaf(q[a].z, k[b].z, fmaf(q[a].w, k[b].w, s[a][b]))));
        dp[a][b] = fmaf(g[a].x, v[b].x, fmaf(g[a].y, v[b].y, fmaf(g[a].z, v[b].z, fmaf(g[a].w, v[b].w, dp[a][b]))));
      }
  }
}

// P = exp(S − LSE) and dS = scale · P ∘ (dP − delta) of one tile, written to shared memory (sP may
// be null: the dQ kernel needs only dS). Elements outside the problem (tails) or above the causal
// diagonal get P = 0, so they add nothing anywhere; so do rows that see no key (LSE = −inf).
struct TileFrame {
  int r0, c0;          // first query row, first key of the tile
  int nq, nk;          // Nq, Nk
  long long offset;    // Nk − Nq: query r sees key c iff c <= r + offset (causal)
  bool causal;
  float scale, scale_log2;
};

__device__ __forceinline__ void probabilities_and_grad_scores(const TileFrame& f, const float* sLse2,
                                                              const float* sDelta, int ty, int tx,
                                                              const float (&s)[4][4], const float (&dp)[4][4],
                                                              float* sP, float* sdS) {
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    const int r = 4 * ty + a;
    const int rg = f.r0 + r;
    const float lse2 = sLse2[r], delta = sDelta[r];
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int c = tx + 16 * b;
      const int cg = f.c0 + c;
      const bool seen = rg < f.nq && cg < f.nk && (!f.causal || cg <= rg + f.offset);
      // exp(S − LSE) as exp2(S·scale·log2e − LSE·log2e): one FMA and one MUFU.EX2.
      const float p = seen ? exp2f(fmaf(s[a][b], f.scale_log2, -lse2)) : 0.f;
      const float ds = grad_score(p, dp[a][b], delta) * f.scale;
      if (sP) sP[r * kLdTile + c] = p;
      sdS[r * kLdTile + c] = ds;
    }
  }
}

// The query tile's LSE (in log2 units) and delta into shared memory; rows past Nq get 0: their P
// is masked to 0 anyway, and 0 keeps every product finite.
__device__ __forceinline__ void load_row_stats(float* sLse2, float* sDelta, const float* lse, const float* delta,
                                               int valid) {
  for (int r = threadIdx.x; r < kBr; r += kThreads) {
    const bool in = r < valid;
    const float l = in ? lse[r] : 0.f;
    sLse2[r] = l * kLog2e;  // −inf stays −inf; that row is masked
    sDelta[r] = in ? delta[r] : 0.f;
  }
}

// dQ_i (Br × D) = dS_ij (Br × Bc) · K_j (Bc × D) for thread rows 4ty+a and its D/16 columns.
template <int D>
__device__ __forceinline__ void grad_q_product(const float* sdS, const float* sK, int ty, int tx,
                                               float (&acc)[4][kTn<D>]) {
  constexpr int L = ld<D>();
#pragma unroll 2
  for (int c = 0; c < kBc; c += 4) {
    float4 a4[4];
#pragma unroll
    for (int a = 0; a < 4; ++a) a4[a] = *reinterpret_cast<const float4*>(sdS + (4 * ty + a) * kLdTile + c);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      float kb[kTn<D>];
      load_cols<D>(sK + (c + kk) * L, kb, tx);
#pragma unroll
      for (int a = 0; a < 4; ++a) {
        const float w = kk == 0 ? a4[a].x : kk == 1 ? a4[a].y : kk == 2 ? a4[a].z : a4[a].w;
#pragma unroll
        for (int n = 0; n < kTn<D>; ++n) acc[a][n] = fmaf(w, kb[n], acc[a][n]);
      }
    }
  }
}

template <int D>
__device__ __forceinline__ void atomic_add_cols(float* row, const float (&vals)[kTn<D>], int tx) {
#if __CUDA_ARCH__ >= 900
  // sm_90 has vector atomics on global memory: one red.v4 instead of four.
  if constexpr (D >= 64) {
#pragma unroll
    for (int g = 0; g < D / 64; ++g)
      atomicAdd(reinterpret_cast<float4*>(row + 64 * g + 4 * tx),
                make_float4(vals[4 * g], vals[4 * g + 1], vals[4 * g + 2], vals[4 * g + 3]));
  } else {
    atomicAdd(reinterpret_cast<float2*>(row + 2 * tx), make_float2(vals[0], vals[1]));
  }
#else
#pragma unroll
  for (int n = 0; n < kTn<D>; ++n) atomicAdd(row + col_of<D>(n, tx), vals[n]);
#endif
}

template <int D>
__device__ __forceinline__ void store_cols(float* row, const float (&vals)[kTn<D>], int tx) {
  if constexpr (D >= 64) {
#pragma unroll
    for (int g = 0; g < D / 64; ++g)
      *reinterpret_cast<float4*>(row + 64 * g + 4 * tx) =
          make_float4(vals[4 * g], vals[4 * g + 1], vals[4 * g + 2], vals[4 * g + 3]);
  } else {
    *reinterpret_cast<float2*>(row + 2 * tx) = make_float2(vals[0], vals[1]);
  }
}

struct KernelArgs {
  const float *q, *k, *v, *d_o, *lse, *delta;
  float *dq, *dk, *dv;
  int nq, nk;
  bool causal;
  float scale;
};

template <int D>
constexpr std::size_t kv_kernel_smem() {
  return sizeof(float) * (2 * kBc * ld<D>() + 2 * kBr * ld<D>() + 2 * kBr * kLdTile + 2 * kBr);
}
template <int D>
constexpr std::size_t dq_kernel_smem() {
  return sizeof(float) * (2 * kBc * ld<D>() + 2 * kBr * ld<D>() + kBr * kLdTile + 2 * kBr);
}

// The key-tile kernel: dK_j and dV_j for one key tile of one head; with kAtomicDq also dQ by atomics.
// Blocks per SM we ask the compiler to fit (registers ≤ 65536 / (256·blocks)): at D ≤ 64 two
// blocks share an SM (shared memory 103 KiB each), so that one block's loads overlap the other's
// arithmetic; at D = 128 the 170 KiB of shared memory allow only one.
template <int D>
constexpr int kMinBlocks = D <= 64 ? 2 : 1;

template <int D, bool kAtomicDq>
__global__ void __launch_bounds__(kThreads, kMinBlocks<D>) backward_kv_kernel(KernelArgs args) {
  extern __shared__ float4 smem4[];
  float* sK = reinterpret_cast<float*>(smem4);
  float* sV = sK + kBc * ld<D>();
  float* sQ = sV + kBc * ld<D>();
  float* sdO = sQ + kBr * ld<D>();
  float* sP = sdO + kBr * ld<D>();
  float* sdS = sP + kBr * kLdTile;
  float* sLse2 = sdS + kBr * kLdTile;
  float* sDelta = sLse2 + kBr;

  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const long long head = blockIdx.y;
  const int c0 = blockIdx.x * kBc;
  const long long q_head = head * args.nq, k_head = head * args.nk;
  TileFrame f{0, c0, args.nq, args.nk, static_cast<long long>(args.nk) - args.nq, args.causal, args.scale,
              args.scale * kLog2e};

  load_tile<D, kBc>(sK, args.k + (k_head + c0) * D, args.nk - c0);
  load_tile<D, kBc>(sV, args.v + (k_head + c0) * D, args.nk - c0);

  constexpr int TN = kTn<D>;
  float dk[4][TN], dv[4][TN];
#pragma unroll
  for (int m = 0; m < 4; ++m)
#pragma unroll
    for (int n = 0; n < TN; ++n) dk[m][n] = dv[m][n] = 0.f;

  // Causal tile skipping: query r sees key c0 only from r = c0 − offset on; earlier query tiles
  // would be all masked. Non-causal: every query tile.
  long long first_row = args.causal ? c0 - f.offset : 0;
  if (first_row < 0) first_row = 0;
  for (int r0 = static_cast<int>(first_row / kBr) * kBr; r0 < args.nq; r0 += kBr) {
    f.r0 = r0;
    const int valid = args.nq - r0;
    __syncthreads();  // the previous tile's products are done with sQ, sdO, sP, sdS
    load_tile<D, kBr>(sQ, args.q + (q_head + r0) * D, valid);
    load_tile<D, kBr>(sdO, args.d_o + (q_head + r0) * D, valid);
    load_row_stats(sLse2, sDelta, args.lse + q_head + r0, args.delta + q_head + r0, valid);
    __syncthreads();

    float s[4][4], dp[4][4];
    scores_and_dp<D>(sQ, sK, sdO, sV, ty, tx, s, dp);
    probabilities_and_grad_scores(f, sLse2, sDelta, ty, tx, s, dp, sP, sdS);
    __syncthreads();

    // dV_j += P_ijᵀ dO_i and dK_j += dS_ijᵀ Q_i: the outer product of column r of the tile, r = 0..Br−1.
#pragma unroll 2
    for (int r = 0; r < kBr; ++r) {
      const float4 p4 = *reinterpret_cast<const float4*>(sP + r * kLdTile + 4 * ty);
      const float4 ds4 = *reinterpret_cast<const float4*>(sdS + r * kLdTile + 4 * ty);
      const float p[4] = {p4.x, p4.y, p4.z, p4.w};
      const float ds[4] = {ds4.x, ds4.y, ds4.z, ds4.w};
      float qr[TN], gr[TN];
      load_cols<D>(sQ + r * ld<D>(), qr, tx);
      load_cols<D>(sdO + r * ld<D>(), gr, tx);
      accumulate_dk_dv<4, TN>(dk, dv, p, ds, qr, gr);
    }

    if constexpr (kAtomicDq) {
      float dq[4][TN];
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int n = 0; n < TN; ++n) dq[a][n] = 0.f;
      grad_q_product<D>(sdS, sK, ty, tx, dq);
#pragma unroll
      for (int a = 0; a < 4; ++a) {
        const int rg = r0 + 4 * ty + a;
        if (rg < args.nq) atomic_add_cols<D>(args.dq + (q_head + rg) * D, dq[a], tx);
      }
    }
  }

  // Every key row of the tile is written, also keys that no query sees (their gradient is 0).
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    const int cg = c0 + 4 * ty + m;
    if (cg < args.nk) {
      store_cols<D>(args.dk + (k_head + cg) * D, dk[m], tx);
      store_cols<D>(args.dv + (k_head + cg) * D, dv[m], tx);
    }
  }
}

// The deterministic dQ kernel: one query tile per block, the key tiles in a fixed order, dQ_i in
// registers; S, P, dP and dS are recomputed here a second time (3 products per tile pair instead
// of 1), which is the price of a fixed summation order.
template <int D>
__global__ void __launch_bounds__(kThreads, kMinBlocks<D>) backward_dq_kernel(KernelArgs args) {
  extern __shared__ float4 smem4[];
  float* sK = reinterpret_cast<float*>(smem4);
  float* sV = sK + kBc * ld<D>();
  float* sQ = sV + kBc * ld<D>();
  float* sdO = sQ + kBr * ld<D>();
  float* sdS = sdO + kBr * ld<D>();
  float* sLse2 = sdS + kBr * kLdTile;
  float* sDelta = sLse2 + kBr;

  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const long long head = blockIdx.y;
  // Causal: the last query tiles see the most keys; start them first.
  const int r0 = (args.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * kBr;
  const long long q_head = head * args.nq, k_head = head * args.nk;
  TileFrame f{r0, 0, args.nq, args.nk, static_cast<long long>(args.nk) - args.nq, args.causal, args.scale,
              args.scale * kLog2e};
  const int valid = args.nq - r0;
  load_tile<D, kBr>(sQ, args.q + (q_head + r0) * D, valid);
  load_tile<D, kBr>(sdO, args.d_o + (q_head + r0) * D, valid);
  load_row_stats(sLse2, sDelta, args.lse + q_head + r0, args.delta + q_head + r0, valid);

  constexpr int TN = kTn<D>;
  float dq[4][TN];
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int n = 0; n < TN; ++n) dq[a][n] = 0.f;

  // Causal: the tile's last row r0+Br−1 sees keys up to r0+Br−1+offset; later key tiles are skipped.
  long long key_end = args.nk;
  if (args.causal) {
    const long long last_row = (r0 + kBr < args.nq ? r0 + kBr : args.nq) - 1;
    key_end = last_row + f.offset + 1;
    if (key_end > args.nk) key_end = args.nk;
  }
  for (int c0 = 0; c0 < key_end; c0 += kBc) {
    f.c0 = c0;
    __syncthreads();
    load_tile<D, kBc>(sK, args.k + (k_head + c0) * D, args.nk - c0);
    load_tile<D, kBc>(sV, args.v + (k_head + c0) * D, args.nk - c0);
    __syncthreads();
    float s[4][4], dp[4][4];
    scores_and_dp<D>(sQ, sK, sdO, sV, ty, tx, s, dp);
    probabilities_and_grad_scores(f, sLse2, sDelta, ty, tx, s, dp, nullptr, sdS);
    __syncthreads();
    grad_q_product<D>(sdS, sK, ty, tx, dq);
  }
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    const int rg = r0 + 4 * ty + a;
    if (rg < args.nq) store_cols<D>(args.dq + (q_head + rg) * D, dq[a], tx);
  }
}

// delta_i = sum_d dO_id O_id, one warp per row.
__global__ void delta_kernel(const float* o, const float* d_o, float* delta, long long rows, int D) {
  const long long row = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  float sum = 0.f;
  for (int d = lane; d < D; d += 32) sum = fmaf(o[row * D + d], d_o[row * D + d], sum);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) delta[row] = sum;
}

template <int D>
void launch_backward(const Problem& p, const KernelArgs& args, bool deterministic, DeviceContext& ctx) {
  const dim3 block(kThreads);
  const unsigned heads = static_cast<unsigned>(p.heads_total());
  const dim3 kv_grid(static_cast<unsigned>((p.seq_k + kBc - 1) / kBc), heads);
  if (!deterministic) {
    constexpr std::size_t smem = kv_kernel_smem<D>();
    static bool configured = false;  // the attribute is set once per instantiation
    if (!configured) {
      FA_CUDA_CHECK(cudaFuncSetAttribute(backward_kv_kernel<D, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem)));
      configured = true;
    }
    // dQ is a sum over key tiles that arrive in any order: start it at zero.
    ctx.kernel_begin("dkdv+dq");
    FA_CUDA_CHECK(cudaMemsetAsync(args.dq, 0, static_cast<std::size_t>(p.q_elements()) * sizeof(float), ctx.stream));
    backward_kv_kernel<D, true><<<kv_grid, block, smem, ctx.stream>>>(args);
    FA_CUDA_CHECK_LAUNCH();
    ctx.kernel_end("dkdv+dq");
  } else {
    constexpr std::size_t smem = kv_kernel_smem<D>();
    constexpr std::size_t smem_dq = dq_kernel_smem<D>();
    static bool configured = false;
    if (!configured) {
      FA_CUDA_CHECK(cudaFuncSetAttribute(backward_kv_kernel<D, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem)));
      FA_CUDA_CHECK(cudaFuncSetAttribute(backward_dq_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem_dq)));
      configured = true;
    }
    ctx.kernel_begin("dkdv");
    backward_kv_kernel<D, false><<<kv_grid, block, smem, ctx.stream>>>(args);
    FA_CUDA_CHECK_LAUNCH();
    ctx.kernel_end("dkdv");
    ctx.kernel_begin("dq");
    const dim3 q_grid(static_cast<unsigned>((p.seq_q + kBr - 1) / kBr), heads);
    backward_dq_kernel<D><<<q_grid, block, smem_dq, ctx.stream>>>(args);
    FA_CUDA_CHECK_LAUNCH();
    ctx.kernel_end("dq");
  }
}

// The key-tile kernel's shared memory at D against what this GPU gives one block: 70.5 / 102.5 /
// 166.5 KiB at D = 32 / 64 / 128, so D = 128 needs more than sm_86/89's 99 KiB and no D fits in
// Turing's 64 KiB (the dQ kernel needs less). Two attribute queries: cheap enough for every call.
std::string shared_memory_refusal_at(std::int64_t dim) {
  const std::size_t bytes = dim == 32 ? kv_kernel_smem<32>() : dim == 64 ? kv_kernel_smem<64>() : kv_kernel_smem<128>();
  return shared_memory_refusal(static_cast<long long>(bytes),
                               "stage 06's backward (its key-tile kernel) at D = " + std::to_string(dim));
}

}  // namespace

std::string skip_reason() {
  std::string reason = cuda_skip_reason(kStageMinComputeCapability);
  if (reason.empty()) reason = shared_memory_refusal_at(32);  // the smallest D: nothing runs (Turing)
  return reason;
}

std::string device_refusal(const Problem& p) {
  if (!skip_reason().empty()) return "";                     // the harness skips (exit 77)
  if (p.dim != 32 && p.dim != 64 && p.dim != 128) return "";  // the CLI refuses it
  return shared_memory_refusal_at(p.dim);
}

void launch_delta(const Problem& p, const float* o, const float* d_o, float* delta, cudaStream_t stream) {
  const long long rows = p.lse_elements();
  const int threads = 256;
  const long long blocks = (rows * 32 + threads - 1) / threads;
  delta_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(o, d_o, delta, rows, static_cast<int>(p.dim));
  FA_CUDA_CHECK_LAUNCH();
}

void attention_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                       DeviceContext& ctx) {
  fa::step05::attention_forward(p, in, out, ctx);
}

void attention_backward(const Problem& p, const AttentionInputs& in, ConstTensorView o, ConstTensorView lse,
                        ConstTensorView d_o, const AttentionGradients& grads, DeviceContext& ctx,
                        const BackwardOptions& options) {
  p.validate();
  if (p.dim != 32 && p.dim != 64 && p.dim != 128)
    throw UsageError("stage 06 supports D = 32, 64 or 128, not " + std::to_string(p.dim));
  if (p.seq_q > (1 << 30) || p.seq_k > (1 << 30) || p.heads_total() > 65535)
    throw UsageError("stage 06: at most 2^30 rows per head and 65535 heads (B·H)");
  if (p.kv_heads() != p.heads) throw UsageError("stage 06 runs Hkv = Hq only (no grouped heads)");
  if (const std::string refusal = shared_memory_refusal_at(p.dim); !refusal.empty()) throw UsageError(refusal);
  // The kernels' raw pointers: as<float>() refuses (UsageError) any dtype but float32 and any
  // non-contiguous layout, before anything is launched.
  const float* o32 = o.as<float>();
  KernelArgs args{in.q.as<float>(),     in.k.as<float>(),     in.v.as<float>(),
                  d_o.as<float>(),      lse.as<float>(),      nullptr,
                  grads.dq.as<float>(), grads.dk.as<float>(), grads.dv.as<float>(),
                  static_cast<int>(p.seq_q), static_cast<int>(p.seq_k), p.causal, p.softmax_scale()};
  NvtxRange range("step06/backward");
  // The only extra memory of the stage: one float per query row.
  float* delta = ctx.scratch_as<float>("delta", static_cast<std::size_t>(p.lse_elements()));
  args.delta = delta;
  ctx.kernel_begin("delta");
  launch_delta(p, o32, args.d_o, delta, ctx.stream);
  ctx.kernel_end("delta");

  switch (p.dim) {
    case 32: launch_backward<32>(p, args, options.deterministic, ctx); break;
    case 64: launch_backward<64>(p, args, options.deterministic, ctx); break;
    default: launch_backward<128>(p, args, options.deterministic, ctx); break;
  }
}

}  // namespace fa::step06
