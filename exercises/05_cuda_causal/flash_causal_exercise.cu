// Exercise 05 — causal tile skipping: the loop bounds of the key tiles and the diagonal mask.
//
// This is stage 05's kernel (steps/05_cuda_causal/flash_causal_kernel.cuh), whole, with two holes
// between `// >>> ex05:TAG` and `// <<< ex05:TAG`: replace the device_todo(...) line with your code
// and leave the markers (the course check compares them with the stage). The header of the stage
// file draws the three kinds of tiles (below the diagonal, on it, above it).
//
//   ex05:kv_bounds       when a.causal: set n_tiles (the key tiles this Q tile loads: up to what its
//                        LAST row i_last = min(i0 + Br, Nq) − 1 sees, keys j ≤ i_last + Nk − Nq)
//                        and mask_from (the first tile that needs the mask: the tiles before it are
//                        seen whole by the FIRST row i0, and so by every row). Clamp to [0, Nk]:
//                        when Nq > Nk whole Q tiles see no key (n_tiles = 0); when the first row
//                        sees every key, no tile needs the mask (mask_from = n_tiles).
//   ex05:diagonal_mask   on the tiles t ≥ mask_from: s[i][j] = −inf where key j0 + tx + 16j lies
//                        past what row i0 + ty + 8i sees (j > i + Nk − Nq).
//
// The checks compare with float64, with stage 04's bits (mask on every tile), and count the tiles
// your bounds load against a pair-by-pair count. Device code cannot throw, so a hole calls
// device_todo(hole); the launcher throws fa::TodoNotDone naming the first hole reached.
//
//   cmake --build build --target check_ex05
// The chapter is docs/05_cuda_causal.md; the answer is in solutions/05_cuda_causal/.
// Outside the holes this file is the stage's kernel in namespace fa::ex05 (the helpers come from the
// stage headers), the device_todo machinery, a launcher that waits for the kernel, and what the
// stage kernel does not have: counters of the tiles your bounds load and mask (kCountTiles), so that
// the checks can see that the tiles above the diagonal are skipped.
//
// What you should see when it passes (on a GPU): three `ok` lines, then `3 of 3 checks pass.`
// Without a GPU the checks report skipped (exit 77): that is not a pass.
// Hints, one at a time:
//   1. Draw the 64 × 64 tiles of a small case with Nq ≠ Nk and mark which ones each Q tile needs.
//   2. With offset = Nk − Nq: keys_end = clamp(i_last + offset + 1, 0, Nk), n_tiles =
//      ⌈keys_end / Bc⌉; keys_full = i0 + offset + 1; mask_from = keys_full ≥ Nk ? n_tiles :
//      max(keys_full, 0) / Bc.
//   3. In the mask: const int col = j0 + tx + 16 * j, row = i0 + ty + 8 * i;
//      if (col > row + causal_offset) s[i][j] = -INFINITY;  (causal_offset = Nk − Nq)
// Common mistakes: the top-left causal mask (j ≤ i) instead of the bottom-right one
// (j ≤ i + Nk − Nq): the same when Nq = Nk, wrong otherwise; bounding the tiles by the first row
// of the Q tile (it sees the fewest keys) instead of the last; clamping before comparing with Nk
// (see the chapter: compare the unclamped value); forgetting Q tiles that see no key at all.
#include "flash_causal_exercise.cuh"

#include <climits>
#include <cmath>

#include "04_cuda_flash_forward/flash_forward.cuh"
#include "05_cuda_causal/flash_causal_kernel.cuh"
#include "fa/cuda/check.cuh"
#include "fa/exercise.hpp"

namespace fa::ex05 {

namespace {

using step05::kBc;
using step05::kBr;
using step05::kKeysPerThread;
using step05::kRowsPerThread;
using step05::kThreads;
using step05::min_blocks_per_sm;
using step05::smem_bytes;

// ---- FA_TODO for device code --------------------------------------------------------------------
enum Hole : int { kKvBounds = 0, kDiagonalMask = 1, kNoHole = INT_MAX };
const char* const kHoleMessages[] = {
    "TODO(ex05:kv_bounds) is not done yet: when causal, n_tiles = the key tiles up to what the Q tile's "
    "last row sees, mask_from = the first tile that its first row does not see whole",
    "TODO(ex05:diagonal_mask) is not done yet: on tiles t >= mask_from, s = -inf where the key lies past "
    "what the row sees (j > i + Nk - Nq)",
};
__device__ int g_hole_reached;  // the lowest hole a thread reached; kNoHole: none
[[maybe_unused]] __device__ void device_todo(Hole hole) { atomicMin(&g_hole_reached, static_cast<int>(hole)); }

// Stage 05's kernel arguments, and the exercise's tile counters.
struct KernelArgs : step05::KernelArgs {
  unsigned long long* tile_counters;  // kCountTiles only: [0] K/V tiles loaded, [1] tiles masked
};

// One block: one Q tile of head `blockIdx.x` (b·H + h), the key tiles its rows can see.
template <int D, bool kCountTiles = false, int kMinBlocks = min_blocks_per_sm<D>()>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
flash_causal_kernel(const KernelArgs a) {
  using namespace step04::detail;
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
  // >>> ex05:kv_bounds
  device_todo(kKvBounds);  // causal: n_tiles and mask_from for this Q tile
  // <<< ex05:kv_bounds

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
    if constexpr (kCountTiles) {
      if (threadIdx.x == 0) atomicAdd(&a.tile_counters[0], 1ull);
    }

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
    // >>> ex05:diagonal_mask
    device_todo(kDiagonalMask);  // s = -inf past each row's last key, on tiles t >= mask_from
    // <<< ex05:diagonal_mask
    if constexpr (kCountTiles) {
      if (t >= mask_from && threadIdx.x == 0) atomicAdd(&a.tile_counters[1], 1ull);
    }
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

}  // namespace

void attention_forward(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                       DeviceContext& ctx, unsigned long long* tile_counters) {
  step04::check_launchable(p, in, out, "ex05");
  const int none = kNoHole;
  FA_CUDA_CHECK(cudaMemcpyToSymbolAsync(g_hole_reached, &none, sizeof none, 0, cudaMemcpyHostToDevice, ctx.stream));
  const KernelArgs a{{in.q.as<float>(), in.k.as<float>(), in.v.as<float>(), out.o.as<float>(), out.lse.as<float>(),
                      static_cast<int>(p.seq_q), static_cast<int>(p.seq_k),
                      p.softmax_scale() * static_cast<float>(M_LOG2E), p.causal, /*heavy_first=*/true},
                     tile_counters};
  const dim3 grid(static_cast<unsigned>(p.heads_total()), static_cast<unsigned>((p.seq_q + kBr - 1) / kBr));
  auto launch = [&](auto kernel, int smem) {
    FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    kernel<<<grid, kThreads, smem, ctx.stream>>>(a);
    FA_CUDA_CHECK_LAUNCH();
  };
  if (tile_counters) {
    if (p.dim == 32) launch(flash_causal_kernel<32, true>, smem_bytes<32>());
    else if (p.dim == 64) launch(flash_causal_kernel<64, true>, smem_bytes<64>());
    else launch(flash_causal_kernel<128, true>, smem_bytes<128>());
  } else {
    if (p.dim == 32) launch(flash_causal_kernel<32, false>, smem_bytes<32>());
    else if (p.dim == 64) launch(flash_causal_kernel<64, false>, smem_bytes<64>());
    else launch(flash_causal_kernel<128, false>, smem_bytes<128>());
  }
  int reached = kNoHole;
  FA_CUDA_CHECK(cudaMemcpyFromSymbolAsync(&reached, g_hole_reached, sizeof reached, 0, cudaMemcpyDeviceToHost, ctx.stream));
  FA_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  if (reached != kNoHole) throw TodoNotDone(kHoleMessages[reached]);
}

}  // namespace fa::ex05
