// heads.cuh — which K/V head a query head reads: a compile-time policy that a kernel takes as a
// template parameter and a launch passes in as a value (FlashAttention-3 keeps the same choice
// beside its mainloop). Stage 09's kernel is written for SameHeads; stage 12 passes GroupedHeads.
//
// Heads are numbered over the batch, bh = b·H + h. With grouped-query heads (Hq query heads on
// Hkv = Hq / G K/V heads) query head bh = b·Hq + h reads K/V head bh / G = b·Hkv + h / G, since
// Hq = Hkv·G: one division, and the tensors of K and V hold B·Hkv heads.
#pragma once

namespace fa::policies {

// Multi-head attention: every query head has its own K/V head. Nothing to compute or pass.
struct SameHeads {
  __device__ __forceinline__ int kv_head(int head) const { return head; }
};

// Grouped-query heads: G = Hq / Hkv query heads per K/V head (G = Hq is multi-query attention).
struct GroupedHeads {
  int group = 1;
  __device__ __forceinline__ int kv_head(int head) const { return head / group; }
};

}  // namespace fa::policies
