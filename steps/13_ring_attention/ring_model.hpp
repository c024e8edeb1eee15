// ring_model.hpp — stage 13's ring on the CPU: P "GPUs" as plain structs in one process, each hop
// of the ring a copy from one to the next. Every block is computed in float64, so what this model
// checks is the bookkeeping that the NCCL stage shares with it — the split of the sequence, who
// holds which K/V block when, which blocks the causal mask hides, the running merge of (O, LSE)
// and, in the backward, dK and dV travelling home with their block. Its tests compare it with the
// float64 attention and gradients of common/ on the whole sequence: they must agree to rounding.
#pragma once

#include <vector>

#include "13_ring_attention/ring_schedule.hpp"
#include "fa/problem.hpp"
#include "fa/tensor.hpp"

namespace fa::step13 {

// O [B,H,N,D] and LSE [B,H,N], float64.
struct RingForwardF64 {
  std::vector<double> o, lse;
};
// dQ, dK, dV [B,H,N,D], float64.
struct RingGradientsF64 {
  std::vector<double> dq, dk, dv;
};

// Self-attention of one sequence per (batch, head): Nq = Nk, Hkv = H, no packed batch (UsageError
// otherwise). `gpus` ≥ 1 simulated GPUs.
RingForwardF64 ring_forward_model(const Problem& p, const AttentionData& in, int gpus, Split split);

// The backward from the forward's O and LSE and the upstream gradient d_o [B,H,N,D].
RingGradientsF64 ring_backward_model(const Problem& p, const AttentionData& in, const HostTensor& d_o,
                                     const RingForwardF64& forward, int gpus, Split split);

// The model against the float64 attention and gradients of the whole sequence (common's reference
// and backward, every row of every head): for each output, the largest |model − reference| over the
// largest |reference|. NaN-safe: a NaN makes the error +inf.
struct ModelErrors {
  double o = 0, lse = 0, dq = 0, dk = 0, dv = 0;
};
ModelErrors model_errors(const Problem& p, const AttentionData& in, const HostTensor& d_o, int gpus, Split split);
double max_relative_error(const std::vector<double>& got, const std::vector<double>& want);

// The problems the ring runs: one line (fa::UsageError) for any other.
void require_ring_problem(const Problem& p, int gpus);

}  // namespace fa::step13
