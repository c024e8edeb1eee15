// flash_forward_kernel.cuh — Stage 04's one fused kernel: S and P never leave the chip.
//
// Stage 03 ran three kernels and wrote S and P ([Nq, Nk] each, per head) to device memory. Here
// one thread block owns one tile of Br = 64 query rows of one head; the Q tile stays in shared
// memory, K and V stream through it in tiles of Bc = 64 keys, and each tile of scores is folded
// into running statistics with the online softmax (FA2, Algorithm 1; stage 02 on the CPU):
//
//   S_i^(j) = τ · Q_i K_jᵀ                                        [Br, Bc], in registers
//   m_i^(j) = max(m_i^(j−1), rowmax S_i^(j))                      m^(0) = −inf
//   P̃_i^(j) = exp(S_i^(j) − m_i^(j))                              [Br, Bc], via shared memory
//   l_i^(j) = exp(m_i^(j−1) − m_i^(j)) · l_i^(j−1) + rowsum P̃_i^(j)
//   Õ_i^(j) = diag(exp(m_i^(j−1) − m_i^(j))) · Õ_i^(j−1) + P̃_i^(j) V_j      in registers
//   and once, after the last tile: O_i = Õ_i / l_i, LSE_i = m_i + log l_i.
//
// exp2 instead of exp: the scale τ and log2(e) are folded into Q as it is loaded (Q' = τ·log2(e)·Q),
// so S' = Q' Kᵀ = log2(e)·S and exp(S − m) = exp2(S' − m'): one MUFU.EX2 per score, no multiply.
// m is kept in these log2 units; LSE = ln 2 · (m' + log2 l) converts back at the end.
//
// The tiles of one block (Br = Bc = 64; D = 32, 64 or 128, a template parameter):
//
//                 keys j0 .. j0+63 (one K/V tile, streamed)
//                ┌──────────────────┐
//   Q tile       │ S tile 64 x 64   │   thread (ty, tx), ty = tid/16 in 0..7, tx = tid%16:
//   64 x D  ───► │ 128 threads,     │     rows  ty + 8·i  (i = 0..7)   8 rows
//   (smem)       │ 8 x 4 scores each│     keys  tx + 16·j (j = 0..3)   4 keys   → 32 scores
//                └──────────────────┘   the 16 threads of a half-warp share each row: row max
//                         │ P̃ (smem)     and row sum are warp shuffles (xor 1, 2, 4, 8)
//                         ▼
//   O tile 64 x D in registers: the same 8 rows, columns (k·16 + tx)·4 .. +3 → 8 x D/16 each
//
// Bytes each tile moves (float32):       D = 32   D = 64   D = 128
//   Q tile, once per block, global→smem     8 KiB   16 KiB    32 KiB
//   K tile, every tile, global→smem         8 KiB   16 KiB    32 KiB   (cp.async, through L2)
//   V tile, every tile, global→smem         8 KiB   16 KiB    32 KiB
//   P̃ tile, every tile, regs→smem→regs     16 KiB   16 KiB    16 KiB   (never device memory)
//   O tile, once per block, regs→global     8 KiB   16 KiB    32 KiB;  LSE 256 B
// Shared memory per block = Q + K + V + P̃ = 40 / 64 / 112 KiB; 3 / 2 / 2 blocks run per SM, as
// many as the registers allow (min_blocks_per_sm below): 12 / 8 / 8 warps of 64.
//
// Arithmetic against shared-memory traffic (why the micro-tile is 8 x 4): per 4 steps of the
// D loop a thread loads 8 float4 of Q (its 8 rows) and 4 float4 of K (its 4 keys) and does
// 8·4·4 = 128 FMAs. A warp's Q loads are 2 distinct addresses (2 rows, broadcast): 1 wavefront
// each; its K loads 16 distinct float4: 2 wavefronts each. 16 wavefronts per 128 warp-FMAs, where
// the SM does 4 warp-FMAs per wavefront (128 FMA/clk against 128 B/clk): half the shared-memory
// bandwidth at full FMA rate. A 4 x 4 micro-tile: 12 wavefronts per 64 warp-FMAs, three quarters
// of it for QKᵀ alone (docs/04_cuda_flash_forward.md counts both).
//
// Shared layout: row-major tiles with an XOR swizzle on the 16-byte column index,
// float4 column c4 of row r lives at c4 ^ (r & 7). The 16 keys a half-warp reads at one d
// (rows tx + 16j) then fall in 8 distinct bank groups: 2 wavefronts, the minimum for 256 bytes,
// with no padding (padding would push D = 128 past 2 blocks per SM).
//
// Masks (stage 04: no tile is skipped): the key tail of the last tile (j ≥ Nk) and, when causal,
// keys j > i + Nk − Nq are set to −inf before the softmax, on EVERY tile. Padded rows of the last
// Q tile (i ≥ Nq) and keys past Nk are zero-filled in shared memory, so no NaN can enter P̃·V.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fa/cuda/fp32/flash_tiles.cuh"

namespace fa::step04 {

// The block shape, shared-memory budget, swizzled layouts and tile copies described above live in
// common/cuda/include/fa/cuda/fp32/flash_tiles.cuh, shared with stage 05's causal kernel.
using namespace fp32;

struct KernelArgs {
  const float* q;      // [B, H, Nq, D]
  const float* k;      // [B, H, Nk, D]
  const float* v;      // [B, H, Nk, D]
  float* o;            // [B, H, Nq, D]
  float* lse;          // [B, H, Nq]
  int seq_q, seq_k;    // Nq, Nk
  float scale_log2;    // τ · log2(e)
  bool causal;
};

}  // namespace fa::step04

// The online softmax of one tile and the final normalization (the hole of exercise ex04): angle
// brackets on purpose, the exercise builds this kernel with its own folder first on the include
// path. It uses the tile constants, OutCols (fa::fp32) and KernelArgs above.
#include <online_softmax_tile.cuh>

namespace fa::step04 {

// One block: Q tile `blockIdx.y` of head `blockIdx.x` (b·H + h), all key tiles. kMinBlocks is
// the occupancy the registers are budgeted for (lab/tune.cu measures the alternatives).
template <int D, int kMinBlocks = min_blocks_per_sm<D>()>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
flash_forward_kernel(const KernelArgs a) {
  using namespace detail;
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

    online_softmax_tile<Cols::kCount>(s, m, l, o);  // after it, s holds P̃

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

  finish_rows<D>(o, m, l, a, bh, i0, ty, tx);
}

}  // namespace fa::step04
