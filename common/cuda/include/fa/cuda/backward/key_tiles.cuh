// key_tiles.cuh — what every key-tile backward kernel shares (stage 08's on mma.sync, its ladder's
// rungs, stage 10's on wgmma): the launch's arguments, the query tiles a key tile meets (and which of
// them need the mask), and dQ's atomic addition into its float32 accumulator. Taught in stage 08
// (docs/08_tensor_core_backward.md); the host frame around such a kernel is frame.cuh, the two small
// kernels it launches row_kernels.cuh.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fa::bwd {

// The per-row arrays (D, LSE·log2e) are padded to a multiple of this many rows per head: a multiple
// of every key-tile kernel's query tile (64, 80 or 128 rows), so that a tile reads them without a
// bounds check.
inline constexpr int kRowPadding = 640;

// One launch: [B·H, N, D] tensors (T = __half or __nv_bfloat16), contiguous.
template <class T>
struct BackwardArgs {
  const T* q;
  const T* k;
  const T* v;
  const T* d_o;
  // Per query row, padded to a multiple of kRowPadding per head (row_kernels.cuh writes them):
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

}  // namespace fa::bwd
