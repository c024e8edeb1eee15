// flash_causal_kernel.cuh — Stage 05's kernel: stage 04's, with causal tile skipping.
//
// Stage 04 ran every Q tile against every K/V tile and masked each one when causal. With the mask
// aligned to the bottom-right corner (query i sees key j iff j ≤ i + Nk − Nq), the tiles of one
// Q tile (rows i0 .. i_last) fall into three kinds:
//
//            key tiles →   0    1    2    3    4    5
//   Q tile 0 (rows 0..63)  [▓▓] [  ] [  ] [  ] [  ] [  ]     ▓▓ diagonal: loaded, masked
//   Q tile 1              [██] [▓▓] [  ] [  ] [  ] [  ]     ██ below: loaded, no mask
//   Q tile 2              [██] [██] [▓▓] [  ] [  ] [  ]     [ ] above: never loaded
//   (Nq = Nk, Br = Bc = 64)
//
//   below    every row of the Q tile sees every key of the tile: no mask at all;
//   diagonal some pair (i, j) of the tile is masked: the mask is applied, to these tiles only;
//   above    no row sees any key of the tile: skipped — its K and V are never loaded.
//
// The bounds, for Q tile rows i0 .. i_last (i_last = min(i0 + Br, Nq) − 1) and offset = Nk − Nq:
//   keys_end  = clamp(i_last + offset + 1, 0, Nk)   keys the tile's LAST row sees: the most of any row
//   n_tiles   = ⌈keys_end / Bc⌉                      tiles loaded; 0 when no row sees any key
//   keys_full = i0 + offset + 1                      keys the tile's FIRST row sees: every row sees them
//   mask_from = keys_full ≥ Nk ? n_tiles : ⌊max(keys_full, 0) / Bc⌋   tiles before it need no mask
// For Nq = Nk (offset 0) and Br = Bc this is the familiar "tiles 0..q_tile, the last one masked".
// For Nq < Nk (offset > 0: the queries are the last Nq positions, as when decoding with a KV cache)
// every Q tile sees at least `offset` keys and the diagonal moves right; when offset is not a
// multiple of Bc the diagonal cuts two key tiles per Q tile. For Nq > Nk (offset < 0) the first
// −offset query rows see nothing: keys_end = 0 for the Q tiles made only of them, which load no
// tile and write O = 0, LSE = −inf.
//
// Scheduling: the Q tile with the most key tiles is the last one. The grid's y index runs over Q
// tiles and the hardware starts blocks in index order, so by default q_tile = gridDim.y − 1 −
// blockIdx.y: the heaviest tiles start first and the short ones fill the tail of the grid
// (heavy_first = false keeps the natural order, for the measurement in docs/05_cuda_causal.md).
//
// Bitwise the same as stage 04: a tile above the diagonal contributes, for a row that has seen a
// key, alpha = exp2(m − m) = 1 exactly, P̃ = 0 and Õ + 0·V = Õ exactly; for a row that has not,
// it leaves m = −inf, l = 0, Õ = 0. Skipping it changes no bit (tests/test_flash_causal.cu).
//
// Which tiles are skipped is checked on the host: count_tiles (flash_causal.cu) applies the bounds
// above to every Q tile, and the tests compare it with a pair-by-pair count of what each tile sees.
#pragma once

#include "fa/cuda/fp32/flash_tiles.cuh"  // stage 04's tile building blocks

// The causal mask of a diagonal tile (the hole of exercise ex05): angle brackets on purpose, the
// exercise builds this kernel with its own folder first on the include path.
#include <causal_tiles.cuh>

namespace fa::step05 {

using fp32::kBc;
using fp32::kBr;
using fp32::kKeysPerThread;
using fp32::kRowsPerThread;
using fp32::kThreads;
using fp32::min_blocks_per_sm;
using fp32::smem_bytes;

struct KernelArgs {
  const float* q;      // [B, H, Nq, D]
  const float* k;      // [B, H, Nk, D]
  const float* v;      // [B, H, Nk, D]
  float* o;            // [B, H, Nq, D]
  float* lse;          // [B, H, Nq]
  int seq_q, seq_k;    // Nq, Nk
  float scale_log2;    // τ · log2(e)
  bool causal;
  bool heavy_first;    // reverse the Q tile order (the heaviest first)
};

// One block: one Q tile of head `blockIdx.x` (b·H + h), the key tiles its rows can see.
template <int D, int kMinBlocks = min_blocks_per_sm<D>()>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
flash_causal_kernel(const KernelArgs a) {
  using namespace fp32;
  using Cols = OutCols<D>;
  extern __shared__ float4 smem_f4[];  // float4: the dynamic buffer is 16-byte aligned
  float* const Qs = reinterpret_cast<float*>(smem_f4);  // [Br][D]  Q' = τ·log2(e)·Q
  float* const Ks = Qs + kBr * D;                       // [Bc][D]  K_j
  float* const Vs = Ks + kBc * D;                       // [Bc][D]  V_j
  float* const Ps = Vs + kBc * D;                       // [Br][Bc] P̃

  const int tx = static_cast<int>(threadIdx.x) % 16, ty = static_cast<int>(threadIdx.x) / 16;
  // The heaviest Q tiles (the most key tiles) first: see the header.
  const int q_tile = a.heavy_first ? static_cast<int>(gridDim.y - 1 - blockIdx.y) : static_cast<int>(blockIdx.y);
  const int i0 = q_tile * kBr;
  const std::int64_t bh = blockIdx.x;
  const float* const q_head = a.q + bh * a.seq_q * D;
  const float* const k_head = a.k + bh * a.seq_k * D;
  const float* const v_head = a.v + bh * a.seq_k * D;
  const int causal_offset = a.seq_k - a.seq_q;  // query i sees key j iff j <= i + offset

  // Without a mask: every key tile, none masked (the key tail aside). Causal: see the header.
  int n_tiles = (a.seq_k + kBc - 1) / kBc;
  int mask_from = n_tiles;  // the first key tile that needs the causal mask
  if (a.causal) {
    const int i_last = min(i0 + kBr, a.seq_q) - 1;
    const int keys_end = max(0, min(i_last + causal_offset + 1, a.seq_k));  // what the last row sees
    n_tiles = (keys_end + kBc - 1) / kBc;  // tiles past it: above the diagonal, never loaded
    const int keys_full = i0 + causal_offset + 1;  // what every row sees (before clamping to [0, Nk])
    mask_from = keys_full >= a.seq_k ? n_tiles : max(keys_full, 0) / kBc;
  }

  load_q_tile<D>(Qs, q_head, i0, a.seq_q, a.scale_log2);
  if (n_tiles > 0) {
    load_kv_tile_async<D>(Ks, k_head, 0, a.seq_k);
    cp_async_commit();
  }

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

    // The causal mask on the diagonal tiles only (stage 04 masked every tile): −inf → P̃ = 0.
    mask_diagonal_tile(s, t, mask_from, i0, j0, ty, tx, causal_offset);
    if (j0 + kBc > a.seq_k) {  // the key tail of the last tile: keys that do not exist
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
        for (int j = 0; j < kKeysPerThread; ++j)
          if (j0 + tx + 16 * j >= a.seq_k) s[i][j] = kNegInf;
    }

    // Fold this tile into m, l and Õ for each of the thread's 8 rows. After it, s holds P̃.
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      // The row's max over this tile: 4 keys here, then across the 16 threads that share the row.
      float tile_max = fmaxf(fmaxf(s[i][0], s[i][1]), fmaxf(s[i][2], s[i][3]));
#pragma unroll
      for (int lane_mask = 1; lane_mask < 16; lane_mask <<= 1)
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, lane_mask));
      const float m_new = fmaxf(m[i], tile_max);
      // A row that has seen no key yet keeps m = −inf; subtracting 0 instead keeps exp2 away from
      // (−inf) − (−inf) = NaN: its P̃ is exp2(−inf) = 0 and its alpha exp2(−inf) = 0 (l, Õ are 0).
      const float m_use = m_new == kNegInf ? 0.f : m_new;
      // exp(m_old − m_new) moves everything summed so far onto the new max: ≤ 1, exactly 1 when
      // the max did not change, and 0 on the row's first visible tile.
      const float alpha = exp2f(m[i] - m_use);
      float row_sum = 0.f;
#pragma unroll
      for (int j = 0; j < kKeysPerThread; ++j) {
        s[i][j] = exp2f(s[i][j] - m_use);  // every exponent ≤ 0: no overflow, even at scores of 200
        row_sum += s[i][j];
      }
      l[i] = alpha * l[i] + row_sum;  // this thread's 4 keys only: reduced across the row at the end
#pragma unroll
      for (int c = 0; c < Cols::kCount; ++c) o[i][c] *= alpha;
      m[i] = m_new;
    }

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

  // Once per row: l summed across the 16 threads of the row, O = Õ / l, LSE = ln2 · (m' + log2 l).
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    float row_sum = l[i];
#pragma unroll
    for (int lane_mask = 1; lane_mask < 16; lane_mask <<= 1)
      row_sum += __shfl_xor_sync(0xffffffffu, row_sum, lane_mask);
    const int row = i0 + ty + 8 * i;
    if (row >= a.seq_q) continue;  // padding rows of the last Q tile
    // l = 0 only for a row that saw no key: then Õ = 0 too, and O = 0, LSE = −inf (not NaN).
    const float inv_l = row_sum > 0.f ? 1.f / row_sum : 0.f;
    float* const o_row = a.o + (bh * a.seq_q + row) * D;
#pragma unroll
    for (int k = 0; k < Cols::kChunks; ++k) {
      const int col = (k * 16 + tx) * Cols::kVec;
      if constexpr (Cols::kVec == 4)
        *reinterpret_cast<float4*>(o_row + col) = make_float4(o[i][4 * k] * inv_l, o[i][4 * k + 1] * inv_l,
                                                              o[i][4 * k + 2] * inv_l, o[i][4 * k + 3] * inv_l);
      else
        *reinterpret_cast<float2*>(o_row + col) = make_float2(o[i][2 * k] * inv_l, o[i][2 * k + 1] * inv_l);
    }
    if (tx == 0) a.lse[bh * a.seq_q + row] = row_sum > 0.f ? kLn2 * (m[i] + log2f(row_sum)) : kNegInf;
  }
}

}  // namespace fa::step05
