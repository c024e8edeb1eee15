// backward.hpp — what the backward stages share: gradient views, host data, the float64 backward
// that they are verified against, and the backward harness (the counterpart of stage.hpp).
//
// The math (one head; S = scale·Q Kᵀ masked, P = softmax_row(S), O = P V, L a scalar loss,
// dX = ∂L/∂X):
//   dV = Pᵀ dO      dP = dO Vᵀ      D_i = rowsum(dO ∘ O)_i = rowsum(P ∘ dP)_i
//   dS = P ∘ (dP − D)                dQ = scale · dS K      dK = scale · dSᵀ Q
// A query row that sees no key has P = 0: it contributes nothing, and its dQ row is 0.
//
// The harness runs, for each size: fresh seeded Q, K, V and dO (or --load with do.npy), the
// forward then the backward on NaN-poisoned gradients, memory measured over forward+backward,
// the backward timed (median), dQ/dK/dV (and O, LSE) verified against the float64 backward —
// every row while the problem is small, sampled query rows (dQ) and key rows (dK, dV) of sampled
// heads beyond. Results rows have pass = "bwd" and FLOPs = 2.5x the forward's.
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fa/stage.hpp"

namespace fa {

// The gradients a backward writes: [B,H,Nq,D], [B,H,Nk,D], [B,H,Nk,D] float32 (device pointers
// for GPU stages).
struct AttentionGradients {
  float* dq = nullptr;
  float* dk = nullptr;
  float* dv = nullptr;
};

// Host inputs of one backward case: Q, K, V and the upstream gradient dO.
struct BackwardData {
  AttentionData in;
  HostTensor d_o;
};
BackwardData make_backward_inputs(const Problem& p, std::uint64_t seed, InputKind kind = InputKind::normal);

// Everything a forward+backward produces, on the host.
struct BackwardResult {
  HostTensor o, lse, dq, dk, dv;
  BackwardResult() = default;
  BackwardResult(const Problem& p, float fill);
};

// ---- the float64 reference ---------------------------------------------------------------------
using MatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using VectorD = Eigen::VectorXd;

MatrixD head_f64(const HostTensor& t, std::int64_t b, std::int64_t h);  // one [N, D] head, as float64

// The forward of one head in float64, materialized (S is Nq×Nk): O and LSE. Used by the finite
// differences that check the backward below.
void head_forward_f64(const Problem& p, const MatrixD& q, const MatrixD& k, const MatrixD& v, MatrixD& o,
                      VectorD& lse);

// The backward of one head in float64, for chosen query rows (O, LSE, dQ) and key rows (dK, dV).
// It first computes LSE_i and D_i of every row in blocks of rows (a dK/dV row depends on all
// queries), then each chosen row with matrix-vector products: O(Nq·Nk·D) time, O(block·Nk) memory.
struct HeadGradientsF64 {
  std::vector<std::int64_t> q_rows, k_rows;
  MatrixD o, dq;     // q_rows.size() × D
  VectorD lse;       // q_rows.size()
  MatrixD dk, dv;    // k_rows.size() × D
  // What float32 errors scale with (the largest over the chosen rows): each output is a sum, and
  // its rounding error is bounded by the sum of its terms' magnitudes, not by its value (which
  // can cancel to 0). With A_ij = Σ_d |dO_id V_jd| + Σ_d |dO_id O_id| (the terms of dP − D):
  //   O: Σ_j P_ij |V_jd|   dV: Σ_i P_ij |dO_id|   dQ: scale Σ_j P_ij A_ij |K_jd|   dK: scale Σ_i P_ij A_ij |Q_id|
  double bound_o = 0, bound_dq = 0, bound_dk = 0, bound_dv = 0;
  double max_abs_score = 0;  // max |scale · q_i · k_j| over visible pairs: P's relative error grows with it
};
HeadGradientsF64 head_backward_f64(const Problem& p, const MatrixD& q, const MatrixD& k, const MatrixD& v,
                                   const MatrixD& d_o, const std::vector<std::int64_t>& q_rows,
                                   const std::vector<std::int64_t>& k_rows);
std::vector<std::int64_t> all_rows(std::int64_t n);

// ---- verification ------------------------------------------------------------------------------
// The tolerance of a float32 backward against float64, from the arithmetic (docs/06_cuda_backward.md):
//   rel = safety · u · (sqrt(max(Nq, Nk) + D) + max|scaled score|),   u = 2^-24
// (sums of up to N terms and dot products of D terms round like a random walk; exp(S − LSE) loses
// u·|S| relative), and an element passes if |got − ref| <= rel·bound + rel·|ref|, with the
// tensor's bound from HeadGradientsF64. LSE keeps the forward's kFloat32Tol.
double backward_relative_tolerance(const Problem& p, double max_abs_score, double safety = 8.0);
// Looser, for two float32 results (e.g. stage 06 against the materialized GPU backward):
// |got − ref| <= rel·max|ref| + rel·|ref|.
Tolerance gradient_tolerance(std::span<const double> ref, double rel);

struct BackwardVerification {
  CompareReport o, lse, dq, dk, dv;
  std::string how;  // "all rows" or "2 heads, 26 query rows and 26 key rows each"
  bool ok() const { return o.ok() && lse.ok() && dq.ok() && dk.ok() && dv.ok(); }
  double max_abs() const;
  double max_rel() const;
  double rel_frobenius() const;  // the worst of the five
};

// Compares `got` with the float64 backward: every row of every head (full = true), or the first
// and last head with `sampled_rows` random query and key rows plus the edges (first, last, the
// causal rows that see the fewest keys).
BackwardVerification verify_backward(const Problem& p, const BackwardData& data, const BackwardResult& got, bool full,
                                     int sampled_rows, std::uint64_t seed, double safety = 8.0);
// Compares two backward results of the same problem element by element (e.g. against the
// materialized GPU backward).
BackwardVerification compare_backward(const BackwardResult& got, const BackwardResult& ref, double grad_rel_tol);

// ---- the harness -------------------------------------------------------------------------------
using BackwardRunFn = std::function<Measurement(const Problem&, const BackwardData&, BackwardResult&, const RunConfig&)>;

struct BackwardVariant {
  std::string stage;          // "06"
  std::string name;           // "flash"
  bool ours = true;           // false: a comparison, measured but not verified
  std::int64_t max_seq = 0;   // longer sequences are skipped; 0: none
  BackwardRunFn run;
  std::string label() const { return stage + " " + name; }
};

struct BackwardStageDefinition {
  std::string id;
  CliSpec cli;                       // --paper-shapes is understood by the harness if listed here
  std::vector<BackwardVariant> variants;
  std::string reference_name = "float64 backward (CPU)";
  double max_full_reference_flops = 4e9;  // beyond: sampled heads and rows
  int sampled_rows = 24;
  double tolerance_safety = 8.0;          // see backward_relative_tolerance
  int default_warmup = 1;
  int default_reps = 5;
  double default_mem_limit_gb = 8.0;
  std::function<std::string()> skip_reason;
  std::function<RunMetadata(const std::string&)> metadata;
};

int run_backward_stage(int argc, const char* const* argv, const BackwardStageDefinition& def);

// The minimum bytes a backward moves: read Q, K, V, O, dO, LSE once, write dQ, dK, dV once.
double bytes_backward_min(const Problem& p);

// --load DIR: q.npy, k.npy, v.npy and do.npy (same shape as q.npy); without do.npy, dO is drawn
// with `seed` (make_output_grad) and `generated_do` is set. --save DIR: o, lse, dq, dk, dv.
BackwardData load_backward_inputs(const std::string& dir, Problem& problem, std::uint64_t seed,
                                  bool* generated_do = nullptr);
void save_backward_outputs(const std::string& dir, const BackwardResult& out);

}  // namespace fa
