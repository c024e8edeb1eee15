// backward.hpp — the float64 backward that the backward stages are verified against, and the
// verification. (The harness, fa/stage.hpp, runs backward stages like forward ones: Pass::backward.)
//
// The math (one head; S = scale·Q Kᵀ masked, P = softmax_row(S), O = P V, L a scalar loss,
// dX = ∂L/∂X):
//   dV = Pᵀ dO      dP = dO Vᵀ      D_i = rowsum(dO ∘ O)_i = rowsum(P ∘ dP)_i
//   dS = P ∘ (dP − D)                dQ = scale · dS K      dK = scale · dSᵀ Q
// A query row that sees no key has P = 0: it contributes nothing, and its dQ row is 0.
//
// dQ/dK/dV (and O, LSE) are verified against the float64 backward — every row while the problem
// is small, sampled query rows (dQ) and key rows (dK, dV) of two heads beyond.
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fa/verify.hpp"

namespace fa {

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
std::vector<std::int64_t> all_indices(std::int64_t n);  // 0, 1, ..., n − 1

// The plainest 16-bit backward, for the tolerance of fp16/bf16 stages (docs/tolerance.md): what a
// tensor-core backward does, one step after the other in float32 on the same rows. The plain
// forward of reference.hpp (P rounded to the dtype before P·V, O rounded) gives O, LSE and
// D_i = rowsum(dO ∘ O); then P = exp(S − LSE) and dS = P ∘ (dP − D) in float32, both rounded to
// the dtype before the products that use them (dV = Pᵀ dO, dK = scale·dSᵀ Q, dQ = scale·dS K,
// float32 sums), each gradient rounded to the dtype. q, k, v, d_o: one head, as float.
using MatrixF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
struct HeadGradientsPlain {
  MatrixF o, dq;  // q_rows.size() × D
  Eigen::VectorXf lse;
  MatrixF dk, dv;  // k_rows.size() × D
};
HeadGradientsPlain head_backward_plain(const Problem& p, const MatrixF& q, const MatrixF& k, const MatrixF& v,
                                       const MatrixF& d_o, const std::vector<std::int64_t>& q_rows,
                                       const std::vector<std::int64_t>& k_rows);

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

// Compares `got` with the float64 backward: every row of every head (full = true), or the first
// and last K/V head (with every query head of their groups) with `sampled_rows` random query and
// key rows plus the edges (first, last, the causal rows that see the fewest keys). Grouped-query
// heads (Hkv < Hq): dK and dV of a K/V head are the sums over the query heads that share it. float32: the bound above. fp16/bf16: the plain rule of
// the forward (verify.hpp), with head_backward_plain on the same rows as the plain implementation,
// plus the float32 bound (for gradients that cancel to 0, where the plain rule allows nothing).
Verification verify_backward(const Problem& p, const AttentionData& data, const AttentionResult& got, bool full,
                             int sampled_rows, std::uint64_t seed, double safety = 8.0);
// Compares two backward results of the same problem element by element (e.g. against the
// materialized GPU backward).
Verification compare_backward(const AttentionResult& got, const AttentionResult& ref, double grad_rel_tol);

}  // namespace fa
