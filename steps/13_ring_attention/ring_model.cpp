// ring_model.cpp — the ring on the CPU in float64 (see the header). The loop over steps, the hops
// and the merge are written as the NCCL stage runs them, one GPU after another instead of at once.
#include "13_ring_attention/ring_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include <ring_merge.hpp>  // the hole of exercise ex13 (holes/)

#include "fa/backward.hpp"
#include "fa/reference.hpp"

namespace fa::step13 {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The rows of `chunks`, in order, stacked: what one GPU holds of a [N, D] head.
MatrixD gather(const MatrixD& head, const std::vector<Chunk>& chunks) {
  std::int64_t rows = 0;
  for (const Chunk& c : chunks) rows += c.length;
  MatrixD out(rows, head.cols());
  std::int64_t at = 0;
  for (const Chunk& c : chunks) {
    out.middleRows(at, c.length) = head.middleRows(c.begin, c.length);
    at += c.length;
  }
  return out;
}

// Where each chunk's rows start among a GPU's stacked rows.
std::vector<std::int64_t> offsets(const std::vector<Chunk>& chunks) {
  std::vector<std::int64_t> at;
  std::int64_t next = 0;
  for (const Chunk& c : chunks) {
    at.push_back(next);
    next += c.length;
  }
  return at;
}

// The block that travels the ring: its owner's chunks with their K and V and, in the backward, the
// dK and dV that the GPUs it visits add to.
struct KvBlock {
  int owner = 0;
  std::vector<Chunk> chunks;
  MatrixD k, v, dk, dv;
};

// What one GPU keeps for the whole run: its query chunks and their rows, and the block in hand.
struct Gpu {
  std::vector<Chunk> chunks;
  MatrixD q, o, d_o, dq;  // [its tokens, D]
  VectorD lse, delta;      // [its tokens]; delta = rowsum(dO ∘ O), the D of the backward
  KvBlock kv;
};

std::vector<Gpu> start_ring(const MatrixD& q, const MatrixD& k, const MatrixD& v, std::int64_t tokens, int gpus,
                            Split split) {
  std::vector<Gpu> ring(gpus);
  for (int r = 0; r < gpus; ++r) {
    Gpu& g = ring[r];
    g.chunks = rank_chunks(tokens, gpus, split, r);
    g.q = gather(q, g.chunks);
    g.kv = KvBlock{r, g.chunks, gather(k, g.chunks), gather(v, g.chunks), {}, {}};
  }
  return ring;
}

// One hop: every GPU passes the block in hand to the next; GPU r receives GPU r − 1's.
void hop(std::vector<Gpu>& ring) {
  KvBlock last = std::move(ring.back().kv);
  for (std::size_t r = ring.size() - 1; r > 0; --r) ring[r].kv = std::move(ring[r - 1].kv);
  ring.front().kv = std::move(last);
}

// f(q_at, q_rows, k_at, k_rows, diagonal) for each pair of (query chunk, key chunk) the mask leaves,
// in the GPU's stacked rows.
template <class F>
void for_each_block(const Gpu& g, bool causal, F&& f) {
  const std::vector<std::int64_t> q_at = offsets(g.chunks), k_at = offsets(g.kv.chunks);
  for (std::size_t a = 0; a < g.chunks.size(); ++a)
    for (std::size_t b = 0; b < g.kv.chunks.size(); ++b) {
      const Block kind = classify(g.chunks[a], g.kv.chunks[b], causal);
      if (kind != Block::skipped)
        f(q_at[a], g.chunks[a].length, k_at[b], g.kv.chunks[b].length, kind == Block::diagonal);
    }
}

// The block's scaled scores; on the diagonal (the same chunk of queries and keys) key j > query i is −inf.
MatrixD block_scores(const MatrixD& q, const MatrixD& k, double scale, bool diagonal) {
  MatrixD s = scale * q * k.transpose();
  if (diagonal)
    for (Eigen::Index i = 0; i < s.rows(); ++i)
      for (Eigen::Index j = i + 1; j < s.cols(); ++j) s(i, j) = -kInf;
  return s;
}

// Attention of the queries [q_at, +q_rows) over the block's keys [k_at, +k_rows), each row's (O_b,
// LSE_b) folded into the GPU's running (O, LSE) by merge_row.
void attend_block(Gpu& g, double scale, std::int64_t q_at, std::int64_t q_rows, std::int64_t k_at,
                  std::int64_t k_rows, bool diagonal) {
  const MatrixD s = block_scores(g.q.middleRows(q_at, q_rows), g.kv.k.middleRows(k_at, k_rows), scale, diagonal);
  const auto v = g.kv.v.middleRows(k_at, k_rows);
  for (std::int64_t i = 0; i < q_rows; ++i) {
    const double m = s.row(i).maxCoeff();  // finite: a diagonal row sees its own key at least
    const double lse_b = m + std::log((s.row(i).array() - m).exp().sum());
    const VectorD o_b = ((s.row(i).array() - lse_b).exp().matrix() * v).transpose();
    merge_row(g.o.row(q_at + i).data(), g.lse(q_at + i), o_b.data(), lse_b, static_cast<int>(o_b.size()));
  }
}

// The gradients of the same block, from the whole row's LSE and delta (FlashAttention-2's backward
// per block): P = exp(S − LSE), dV += Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP − delta), dQ += scale·dS K,
// dK += scale·dSᵀ Q. dQ stays on this GPU; dK and dV travel with the block.
void backward_block(Gpu& g, double scale, std::int64_t q_at, std::int64_t q_rows, std::int64_t k_at,
                    std::int64_t k_rows, bool diagonal) {
  const auto q = g.q.middleRows(q_at, q_rows);
  const auto d_o = g.d_o.middleRows(q_at, q_rows);
  const auto k = g.kv.k.middleRows(k_at, k_rows);
  const auto v = g.kv.v.middleRows(k_at, k_rows);
  const MatrixD p = (block_scores(q, k, scale, diagonal).colwise() - g.lse.segment(q_at, q_rows)).array().exp().matrix();
  const MatrixD dp = d_o * v.transpose();
  const MatrixD ds = p.cwiseProduct(dp.colwise() - g.delta.segment(q_at, q_rows));
  g.kv.dv.middleRows(k_at, k_rows) += p.transpose() * d_o;
  g.dq.middleRows(q_at, q_rows) += scale * ds * k;
  g.kv.dk.middleRows(k_at, k_rows) += scale * ds.transpose() * q;
}

// Writes a GPU's stacked rows back to their places in one [N, width] head of a [B, H, N, width] array.
void scatter(const MatrixD& rows, const std::vector<Chunk>& chunks, std::vector<double>& out, std::int64_t head,
             std::int64_t tokens) {
  const std::int64_t width = rows.cols();
  std::int64_t at = 0;
  for (const Chunk& c : chunks)
    for (std::int64_t i = 0; i < c.length; ++i, ++at)
      for (std::int64_t x = 0; x < width; ++x) out[(head * tokens + c.begin + i) * width + x] = rows(at, x);
}

MatrixD head_rows(const std::vector<double>& all, std::int64_t head, std::int64_t tokens, std::int64_t width) {
  return Eigen::Map<const MatrixD>(all.data() + head * tokens * width, tokens, width);
}

}  // namespace

void require_ring_problem(const Problem& p, int gpus) {
  if (gpus < 1) throw UsageError("the ring needs at least one GPU, not " + std::to_string(gpus));
  if (p.packed()) throw UsageError("stage 13 runs one sequence per (batch, head), not a packed batch");
  if (p.seq_q != p.seq_k)
    throw UsageError("stage 13 splits one sequence's queries and keys alike: Nq must equal Nk (" +
                     std::to_string(p.seq_q) + " != " + std::to_string(p.seq_k) + ")");
  if (p.kv_heads() != p.heads) throw UsageError("stage 13 runs multi-head attention: --heads-kv must equal --heads");
}

RingForwardF64 ring_forward_model(const Problem& p, const AttentionData& in, int gpus, Split split) {
  require_ring_problem(p, gpus);
  const std::int64_t n = p.seq_q, d = p.dim;
  const double scale = p.softmax_scale();
  RingForwardF64 out{std::vector<double>(p.batch * p.heads * n * d), std::vector<double>(p.batch * p.heads * n)};
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads; ++h) {
      std::vector<Gpu> ring = start_ring(head_f64(in.q, b, h), head_f64(in.k, b, h), head_f64(in.v, b, h), n, gpus, split);
      for (Gpu& g : ring) {
        g.o = MatrixD::Zero(g.q.rows(), d);  // the running pair of a row that has seen no key: (0, −inf)
        g.lse = VectorD::Constant(g.q.rows(), -kInf);
      }
      for (int step = 0; step < gpus; ++step) {
        if (step > 0) hop(ring);  // P − 1 hops: the last block is used where it arrives
        for (Gpu& g : ring)
          for_each_block(g, p.causal, [&](std::int64_t qa, std::int64_t qn, std::int64_t ka, std::int64_t kn, bool diag) {
            attend_block(g, scale, qa, qn, ka, kn, diag);
          });
      }
      const std::int64_t head = b * p.heads + h;
      for (const Gpu& g : ring) {
        scatter(g.o, g.chunks, out.o, head, n);
        scatter(MatrixD(g.lse), g.chunks, out.lse, head, n);
      }
    }
  return out;
}

RingGradientsF64 ring_backward_model(const Problem& p, const AttentionData& in, const HostTensor& d_o,
                                     const RingForwardF64& forward, int gpus, Split split) {
  require_ring_problem(p, gpus);
  const std::int64_t n = p.seq_q, d = p.dim;
  const double scale = p.softmax_scale();
  RingGradientsF64 out;
  for (auto* grad : {&out.dq, &out.dk, &out.dv}) grad->assign(p.batch * p.heads * n * d, 0.0);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads; ++h) {
      const std::int64_t head = b * p.heads + h;
      std::vector<Gpu> ring = start_ring(head_f64(in.q, b, h), head_f64(in.k, b, h), head_f64(in.v, b, h), n, gpus, split);
      const MatrixD o = head_rows(forward.o, head, n, d), lse = head_rows(forward.lse, head, n, 1);
      const MatrixD d_o_head = head_f64(d_o, b, h);
      for (Gpu& g : ring) {
        g.d_o = gather(d_o_head, g.chunks);
        g.lse = gather(lse, g.chunks).col(0);
        g.delta = g.d_o.cwiseProduct(gather(o, g.chunks)).rowwise().sum();  // each GPU from its own rows
        g.dq = MatrixD::Zero(g.q.rows(), d);
        g.kv.dk = MatrixD::Zero(g.kv.k.rows(), d);
        g.kv.dv = MatrixD::Zero(g.kv.v.rows(), d);
      }
      for (int step = 0; step < gpus; ++step) {
        if (step > 0) hop(ring);
        for (Gpu& g : ring)
          for_each_block(g, p.causal, [&](std::int64_t qa, std::int64_t qn, std::int64_t ka, std::int64_t kn, bool diag) {
            backward_block(g, scale, qa, qn, ka, kn, diag);
          });
      }
      hop(ring);  // the P-th hop: GPU r holds GPU r + 1's block after the last step; now each is home
      for (int r = 0; r < gpus; ++r)
        if (ring[r].kv.owner != r) throw std::logic_error("ring model: a dK/dV block did not come home");
      for (const Gpu& g : ring) {
        scatter(g.dq, g.chunks, out.dq, head, n);
        scatter(g.kv.dk, g.chunks, out.dk, head, n);
        scatter(g.kv.dv, g.chunks, out.dv, head, n);
      }
    }
  return out;
}

double max_relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) throw std::logic_error("max_relative_error: sizes differ");
  double err = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isfinite(want[i])) scale = std::max(scale, std::abs(want[i]));
    if (got[i] == want[i]) continue;  // also −inf against −inf: a row without keys
    const double e = std::abs(got[i] - want[i]);
    err = std::isnan(e) ? kInf : std::max(err, e);
  }
  return err / std::max(scale, 1e-300);
}

ModelErrors model_errors(const Problem& p, const AttentionData& in, const HostTensor& d_o, int gpus, Split split) {
  const RingForwardF64 ring = ring_forward_model(p, in, gpus, split);
  const RingGradientsF64 grads = ring_backward_model(p, in, d_o, ring, gpus, split);
  const ReferenceF64 want = reference_attention_f64(p, in);
  std::vector<double> dq, dk, dv;
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads; ++h) {
      const HeadGradientsF64 g = head_backward_f64(p, head_f64(in.q, b, h), head_f64(in.k, b, h), head_f64(in.v, b, h),
                                                   head_f64(d_o, b, h), all_indices(p.seq_q), all_indices(p.seq_k));
      dq.insert(dq.end(), g.dq.data(), g.dq.data() + g.dq.size());
      dk.insert(dk.end(), g.dk.data(), g.dk.data() + g.dk.size());
      dv.insert(dv.end(), g.dv.data(), g.dv.data() + g.dv.size());
    }
  return {max_relative_error(ring.o, want.o), max_relative_error(ring.lse, want.lse), max_relative_error(grads.dq, dq),
          max_relative_error(grads.dk, dk), max_relative_error(grads.dv, dv)};
}

}  // namespace fa::step13
