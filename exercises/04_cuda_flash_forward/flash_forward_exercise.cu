// Exercise 04 — the K/V tile loop of the fused kernel: the online softmax inside it.
//
// This is stage 04's kernel (steps/04_cuda_flash_forward/flash_forward_kernel.cuh), whole, with two
// holes. Each hole sits between `// >>> ex04:TAG` and `// <<< ex04:TAG`: replace the device_todo(...)
// line with your code and leave the markers (the course check compares what is between them with
// the stage). Read the kernel's header in the stage file first: the tile picture, which thread owns
// which scores (rows ty + 8i, keys tx + 16j) and which columns of O.
//
//   ex04:online_softmax  for each of the thread's 8 rows i, fold this tile's scores s[i][0..3]
//                        (in log2 units: S' = log2(e)·S) into m[i], l[i], o[i][..] (FA2):
//                          tile max over the row: the thread's 4, then the 16 threads that share
//                            the row (__shfl_xor_sync with lane masks 1, 2, 4, 8)
//                          m_new = max(m[i], tile max); alpha = exp2f(m[i] − m_new)
//                          s[i][j] = exp2f(s[i][j] − m_new)  (P̃, which the kernel then stores)
//                          l[i] = alpha·l[i] + (this thread's 4 P̃: the row is summed at the end)
//                          o[i][c] *= alpha; m[i] = m_new
//                        and a row that has seen no key yet (m_new = −inf) must not compute
//                        −inf − (−inf) = NaN: subtract 0 instead.
//   ex04:finish          once per row: l summed across the row's 16 threads, O = Õ / l written
//                        (float4 or float2 per chunk of the thread's columns), LSE = ln 2 · (m + log2 l)
//                        by one thread (tx == 0); a row that saw no key: O = 0, LSE = −inf. Skip the
//                        padding rows (row ≥ Nq) — after the shuffles, which every lane must join.
//
// Device code cannot throw, so a hole calls device_todo(hole): it records the hole in a device
// flag, and the launcher, after the kernel, throws fa::TodoNotDone naming the first hole reached.
//
// Check your work (needs a CUDA GPU; without one the checks report "skipped"):
//   cmake --build build --target check_ex04
// The chapter is docs/04_cuda_flash_forward.md; the answer is in solutions/04_cuda_flash_forward/.
// Outside the holes this file is the stage's kernel, in namespace fa::ex04 (the helpers — swz,
// cp.async, the tile loads — come from the stage header), plus the device_todo machinery and a
// launcher that waits for the kernel.
//
// What you should see when it passes (on a GPU): four `ok` lines, then `4 of 4 checks pass.`
// Without a GPU the checks report skipped (exit 77): that is not a pass.
// Hints, one at a time:
//   1. Write the update of one row i; the 16 threads of the row each hold 4 of its 64 scores.
//   2. Everything is in log2 units: alpha = exp2f(m_old − m_new), P̃ = exp2f(s − m_new), and at
//      the end LSE = ln 2 · (m + log2 l) (the kernel multiplied Q by τ·log2 e when loading it).
//   3. float mx = max of s[i][0..3]; for (int o = 1; o < 16; o <<= 1) mx = fmaxf(mx,
//      __shfl_xor_sync(0xffffffff, mx, o)); m_new = fmaxf(m[i], mx); base = m_new == -INFINITY ?
//      0.f : m_new; then alpha, P̃ and l as in hint 2 with base in place of m_new.
// Common mistakes: the folded log2 scale (using expf or logf here, or multiplying by τ again:
// the scores already are log2(e)·τ·QKᵀ); reducing l across threads every tile (sum it once, at
// the end: its partials all get the same alpha); skipping a shuffle on padding rows (every lane
// must join); a row that saw no key: O = 0 and LSE = −inf.
#include "flash_forward_exercise.cuh"

#include <climits>
#include <cmath>

#include "04_cuda_flash_forward/flash_forward.cuh"
#include "04_cuda_flash_forward/flash_forward_kernel.cuh"
#include "fa/cuda/check.cuh"
#include "fa/exercise.hpp"

namespace fa::ex04 {

namespace {

using step04::KernelArgs;
using step04::kBc;
using step04::kBr;
using step04::kKeysPerThread;
using step04::kRowsPerThread;
using step04::kThreads;
using step04::min_blocks_per_sm;
using step04::smem_bytes;

// ---- FA_TODO for device code --------------------------------------------------------------------
enum Hole : int { kOnlineSoftmax = 0, kFinish = 1, kNoHole = INT_MAX };
const char* const kHoleMessages[] = {
    "TODO(ex04:online_softmax) is not done yet: fold the tile's scores into m, l and O for the thread's "
    "8 rows (row max by __shfl_xor_sync over 16 lanes, alpha = exp2f(m_old - m_new), P = exp2f(s - m_new))",
    "TODO(ex04:finish) is not done yet: sum l over the row's 16 threads, write O = O / l and "
    "LSE = ln2 * (m + log2 l) (O = 0, LSE = -inf for a row that saw no key)",
};
__device__ int g_hole_reached;  // the lowest hole a thread reached; kNoHole: none
[[maybe_unused]] __device__ void device_todo(Hole hole) { atomicMin(&g_hole_reached, static_cast<int>(hole)); }

// One block: Q tile `blockIdx.y` of head `blockIdx.x` (b·H + h), all key tiles.
template <int D, int kMinBlocks = min_blocks_per_sm<D>()>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
flash_forward_kernel(const KernelArgs a) {
  using namespace step04::detail;
  using Cols = OutCols<D>;
  extern __shared__ float4 smem_f4[];  // float4: the dynamic buffer is 16-byte aligned
  float* const Qs = reinterpret_cast<float*>(smem_f4);  // [Br][D]  Q' = τ·log2(e)·Q
  float* const Ks = Qs + kBr * D;                       // [Bc][D]  K_j
  float* const Vs = Ks + kBc * D;                       // [Bc][D]  V_j
  float* const Ps = Vs + kBc * D;                       // [Br][Bc] P̃

  const int tx = static_cast<int>(threadIdx.x) % 16, ty = static_cast<int>(threadIdx.x) / 16;
  const int q_tile = static_cast<int>(blockIdx.y);
  const int i0 = q_tile * kBr;
  const std::int64_t bh = blockIdx.x;
  const float* const q_head = a.q + bh * a.seq_q * D;
  const float* const k_head = a.k + bh * a.seq_k * D;
  const float* const v_head = a.v + bh * a.seq_k * D;
  const int causal_offset = a.seq_k - a.seq_q;  // query i sees key j iff j <= i + offset

  load_q_tile<D>(Qs, q_head, i0, a.seq_q, a.scale_log2);
  const int n_tiles = (a.seq_k + kBc - 1) / kBc;  // stage 04: every key tile, masked or not
  load_kv_tile_async<D>(Ks, k_head, 0, a.seq_k);
  cp_async_commit();

  // Per thread: 8 rows' running max m' (log2 units), partial row sum l over its own 4 keys per
  // tile (summed across the half-warp only at the end: the factors exp2(m_old − m_new) are the
  // same for the whole row, so partial sums rescale exactly like the full one), and Õ.
  float m[kRowsPerThread], l[kRowsPerThread], o[kRowsPerThread][Cols::kCount];
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    m[i] = kNegInf;
    l[i] = 0.f;
#pragma unroll
    for (int c = 0; c < Cols::kCount; ++c) o[i][c] = 0.f;
  }
  const int qsw = ty & 7;  // the swizzle term of every row this thread owns (rows ty + 8i)
  const int ksw = tx & 7;  // ... and of every key it owns (keys tx + 16j)
  const int psw = p_key(ty);  // ... and of its rows of P̃

  for (int t = 0; t < n_tiles; ++t) {
    const int j0 = t * kBc;
    cp_async_wait<0>();  // K_j has landed (this thread's part) ...
    __syncthreads();     // ... everyone's part; and every thread is past the last tile's P̃ V
    load_kv_tile_async<D>(Vs, v_head, j0, a.seq_k);  // V_j streams in while S is computed
    cp_async_commit();

    // S' = Q' K_jᵀ for the thread's 8 x 4 scores: per 4 columns of D, 12 float4 loads, 128 FMAs.
    float s[kRowsPerThread][kKeysPerThread];
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
      for (int j = 0; j < kKeysPerThread; ++j) s[i][j] = 0.f;
#pragma unroll
    for (int d4 = 0; d4 < D / 4; ++d4) {
      float4 qv[kRowsPerThread], kv[kKeysPerThread];
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i)
        qv[i] = *reinterpret_cast<const float4*>(Qs + (ty + 8 * i) * D + ((d4 ^ qsw) << 2));
#pragma unroll
      for (int j = 0; j < kKeysPerThread; ++j)
        kv[j] = *reinterpret_cast<const float4*>(Ks + (tx + 16 * j) * D + ((d4 ^ ksw) << 2));
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
        for (int j = 0; j < kKeysPerThread; ++j) {
          s[i][j] = fmaf(qv[i].x, kv[j].x, s[i][j]);
          s[i][j] = fmaf(qv[i].y, kv[j].y, s[i][j]);
          s[i][j] = fmaf(qv[i].z, kv[j].z, s[i][j]);
          s[i][j] = fmaf(qv[i].w, kv[j].w, s[i][j]);
        }
    }

    // The mask, on every tile that has a key tail or when causal (stage 05 will skip and
    // narrow this): −inf scores get P̃ = exp2(−inf) = 0.
    if (a.causal || j0 + kBc > a.seq_k) {
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i) {
        const int row = i0 + ty + 8 * i;
#pragma unroll
        for (int j = 0; j < kKeysPerThread; ++j) {
          const int col = j0 + tx + 16 * j;
          if (col >= a.seq_k || (a.causal && col > row + causal_offset)) s[i][j] = kNegInf;
        }
      }
    }

    // >>> ex04:online_softmax
    device_todo(kOnlineSoftmax);  // m, l, o of the 8 rows updated; s[i][j] = P̃
    // <<< ex04:online_softmax

    // P̃ to shared memory: the P̃ V product needs whole rows of P̃ against whole columns of V, and
    // each thread holds only 4 keys of its rows. 16 KiB of shared memory instead of stage 03's
    // [Nq, Nk] in device memory.
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
      for (int j = 0; j < kKeysPerThread; ++j) Ps[swz_p(ty + 8 * i, tx + 16 * j)] = s[i][j];
    __syncthreads();  // P̃ complete; and nobody reads K_j any more

    if (t + 1 < n_tiles) {  // K_{j+1} streams in during P̃ V
      load_kv_tile_async<D>(Ks, k_head, j0 + kBc, a.seq_k);
      cp_async_commit();
      cp_async_wait<1>();  // everything but the newest group (K_{j+1}): V_j has landed
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // everyone's part of V_j

    // Õ += P̃ V_j: per 4 keys, 8 float4 of P̃ (the thread's rows) and 4 x D/16 floats of V.
#pragma unroll
    for (int c4 = 0; c4 < kBc / 4; ++c4) {
      float4 pv[kRowsPerThread];
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i)
        pv[i] = *reinterpret_cast<const float4*>(Ps + (ty + 8 * i) * kBc + ((c4 ^ psw) << 2));
#pragma unroll
      for (int cc = 0; cc < 4; ++cc) {
        const int key = 4 * c4 + cc;
        float vv[Cols::kCount];
#pragma unroll
        for (int k = 0; k < Cols::kChunks; ++k) {
          const int col = (k * 16 + tx) * Cols::kVec;
          if constexpr (Cols::kVec == 4) {
            const float4 x = *reinterpret_cast<const float4*>(Vs + swz<D>(key, col));
            vv[4 * k] = x.x, vv[4 * k + 1] = x.y, vv[4 * k + 2] = x.z, vv[4 * k + 3] = x.w;
          } else {
            const float2 x = *reinterpret_cast<const float2*>(Vs + swz<D>(key, col));
            vv[2 * k] = x.x, vv[2 * k + 1] = x.y;
          }
        }
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) {
          const float p = cc == 0 ? pv[i].x : cc == 1 ? pv[i].y : cc == 2 ? pv[i].z : pv[i].w;
#pragma unroll
          for (int c = 0; c < Cols::kCount; ++c) o[i][c] = fmaf(p, vv[c], o[i][c]);
        }
      }
    }
  }

  // >>> ex04:finish
  device_todo(kFinish);  // O = Õ / l and LSE for each valid row
  // <<< ex04:finish
}

}  // namespace

void attention_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                       DeviceContext& ctx) {
  step04::check_launchable(p, in, out, "ex04");
  const int none = kNoHole;
  FA_CUDA_CHECK(cudaMemcpyToSymbolAsync(g_hole_reached, &none, sizeof none, 0, cudaMemcpyHostToDevice, ctx.stream));
  const KernelArgs a{in.q.as<float>(), in.k.as<float>(), in.v.as<float>(), out.o.as<float>(), out.lse.as<float>(),
                     static_cast<int>(p.seq_q), static_cast<int>(p.seq_k),
                     p.softmax_scale() * static_cast<float>(M_LOG2E), p.causal};
  const dim3 grid(static_cast<unsigned>(p.heads_total()), static_cast<unsigned>((p.seq_q + kBr - 1) / kBr));
  auto launch = [&](auto kernel, int smem) {
    FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    kernel<<<grid, kThreads, smem, ctx.stream>>>(a);
    FA_CUDA_CHECK_LAUNCH();
  };
  if (p.dim == 32) launch(flash_forward_kernel<32>, smem_bytes<32>());
  else if (p.dim == 64) launch(flash_forward_kernel<64>, smem_bytes<64>());
  else launch(flash_forward_kernel<128>, smem_bytes<128>());
  int reached = kNoHole;
  FA_CUDA_CHECK(cudaMemcpyFromSymbolAsync(&reached, g_hole_reached, sizeof reached, 0, cudaMemcpyDeviceToHost, ctx.stream));
  FA_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  if (reached != kNoHole) throw TodoNotDone(kHoleMessages[reached]);
}

}  // namespace fa::ex04
