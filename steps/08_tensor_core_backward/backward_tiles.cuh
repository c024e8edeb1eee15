// backward_tiles.cuh — what every key-tile kernel of stage 08 shares, the ladder's rungs
// (ladder/) and the stage's kernel (backward_tc_kernel.cuh) alike: the launch's arguments, the
// query tiles a key tile meets (and which of them need the mask), dQ's atomic addition, and the
// packing of two accumulator tiles into an A fragment.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fa/cuda/ptx/mma.cuh"

namespace fa::step08 {

// One launch: [B·H, N, D] tensors (T = __half or __nv_bfloat16), contiguous.
template <class T>
struct BackwardArgs {
  const T* q;
  const T* k;
  const T* v;
  const T* d_o;
  // Per query row, padded to a multiple of Br per head (the preprocessing kernel writes them):
  const float* lse2;   // LSE·log2(e); +inf for a row that sees no key and for the padding (P = 0)
  const float* delta;  // D = rowsum(dO ∘ O); 0 for the padding
  float* dq_accum;     // [B·H, Nq, D] float32, zeroed: Σ over key tiles of dS K (unscaled)
  T* dk;
  T* dv;
  int seq_q, seq_k, seq_q_padded;
  float scale;       // τ: dK = τ·dSᵀQ, dQ = τ·dS K (applied once, at the end)
  float scale_log2;  // τ·log2(e): P = 2^(S·τlog2e − LSE·log2e)
  bool causal;       // bottom-right: key j visible to query i iff j ≤ i + Nk − Nq
  bool key_tiles_first = false;  // the grid's x: a head's key tiles (true) or the heads (BackwardConfig::grid)
};

// The query tiles a key tile [j0, j0 + Bc) meets: from the first query that sees key j0 (causal) to
// the end, and from which one on every (key, query) pair is visible, so that no mask is needed.
struct QueryTiles {
  int begin = 0, end = 0, unmasked_from = 0;
};
__device__ __forceinline__ QueryTiles query_tiles(int j0, int Bc, int Br, int seq_q, int seq_k, bool causal) {
  QueryTiles t;
  t.end = (seq_q + Br - 1) / Br;
  const int offset = seq_k - seq_q;
  const bool key_tail = j0 + Bc > seq_k;
  if (causal) {
    const int first = max(0, j0 - offset);  // the first query that sees key j0
    t.begin = min(first, seq_q) / Br;
    if (first >= seq_q) t.begin = t.end;  // no query sees these keys
    // Tile i needs no mask once its first query sees the tile's last key: i·Br ≥ j0 + Bc − 1 − offset.
    const int need = j0 + Bc - 1 - offset;
    t.unmasked_from = need <= 0 ? 0 : (need + Br - 1) / Br;
  }
  if (key_tail) t.unmasked_from = t.end;  // keys past Nk: every tile masks them
  return t;
}

// Two neighbouring columns of a row of the float32 dQ accumulator += (x, y): one 8-byte atomic on
// sm_90, two 4-byte ones before it.
__device__ __forceinline__ void add_to_dq(float* at, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(at), make_float2(x, y));
#else
  atomicAdd(at, x);
  atomicAdd(at + 1, y);
#endif
}

// Two 8-query column tiles of a warp's accumulators, x[mi][2ks] and x[mi][2ks + 1] (16 keys × 16
// queries), packed to 16 bits of type U as an A fragment: the C→A identity of stage 07.
template <class U, int KM, int NQ>
__device__ __forceinline__ void pack_a(const float (&x)[KM][NQ][4], int mi, int ks, std::uint32_t (&frag)[4]) {
  const float(&c0)[4] = x[mi][2 * ks], (&c1)[4] = x[mi][2 * ks + 1];
  frag[0] = ptx::pack2<U>(c0[0], c0[1]), frag[1] = ptx::pack2<U>(c0[2], c0[3]);
  frag[2] = ptx::pack2<U>(c1[0], c1[1]), frag[3] = ptx::pack2<U>(c1[2], c1[3]);
}

}  // namespace fa::step08
