// rung_args.cuh — what every rung of stage 04's ladder receives (ladder.cuh says what the ladder is).
// The top rung, flash_forward_kernel.cuh, takes fa::step04::KernelArgs instead: the same fields
// with τ·log2(e) in place of τ, because it folds log2(e) into Q (rung 5's idea).
#pragma once

#include <cstdint>

namespace fa::step04::ladder {

struct RungArgs {
  const float* q;    // [B, H, Nq, D]
  const float* k;    // [B, H, Nk, D]
  const float* v;    // [B, H, Nk, D]
  float* o;          // [B, H, Nq, D]
  float* lse;        // [B, H, Nq], natural log
  int seq_q, seq_k;  // Nq, Nk
  float scale;       // τ, multiplied into every score
  bool causal;       // query i sees key j iff j <= i + Nk − Nq
};

inline constexpr float kNegInf = -__builtin_huge_valf();

}  // namespace fa::step04::ladder
