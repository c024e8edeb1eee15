// Exercise 03 — the checks of stage 03's row-softmax kernel (steps/03_cuda_naive/row_softmax.cuh),
// built on the starter's row_passes.cuh (exercises/03_cuda_naive/) or the solution's
// (solutions/03_cuda_naive/): P and LSE against float64, on ordinary rows, causal rows (some
// seeing no key), large logits and rows longer than the block. Needs a CUDA device (exit 77,
// "skipped", without one). A hole the kernel reached is named by the checks' reporter.
//   cmake --build build --target check_ex03
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "03_cuda_naive/row_softmax.cuh"  // the stage's kernel; it includes the hole <row_passes.cuh>
#include "fa/compare.hpp"
#include "fa/cuda/check.cuh"
#include "fa/cuda/device_buffer.cuh"
#include "fa/random.hpp"
#include "fa/stage.hpp"

namespace {

fa::Problem problem(std::int64_t nq, std::int64_t nk, std::int64_t d, bool causal) {
  fa::Problem p;
  p.batch = 2;
  p.heads = 3;
  p.seq_q = nq;
  p.seq_k = nk;
  p.dim = d;
  p.causal = causal;
  return p;
}

// Float32 scores S = scale · Q Kᵀ (computed in float64, then rounded: the kernel's input).
std::vector<float> scores(const fa::Problem& p, const fa::AttentionData& in) {
  std::vector<float> s;
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads; ++h)
      for (std::int64_t i = 0; i < p.seq_q; ++i)
        for (std::int64_t j = 0; j < p.seq_k; ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < p.dim; ++d) dot += double(in.q.at(b, h, i, d)) * in.k.at(b, h, j, d);
          s.push_back(static_cast<float>(p.softmax_scale() * dot));
        }
  return s;
}

// P and LSE of those scores in float64, from the definition.
void reference(const fa::Problem& p, const std::vector<float>& s, std::vector<double>& prob, std::vector<double>& lse) {
  prob.assign(s.size(), 0.0);
  lse.assign(static_cast<std::size_t>(p.lse_elements()), -INFINITY);
  for (std::int64_t r = 0; r < p.heads_total() * p.seq_q; ++r) {
    const std::int64_t visible = p.keys_visible(r % p.seq_q);
    if (visible == 0) continue;
    const float* row = s.data() + r * p.seq_k;
    double m = -INFINITY, l = 0;
    for (std::int64_t j = 0; j < visible; ++j) m = std::fmax(m, row[j]);
    for (std::int64_t j = 0; j < visible; ++j) l += std::exp(row[j] - m);
    for (std::int64_t j = 0; j < visible; ++j) prob[r * p.seq_k + j] = std::exp(row[j] - m) / l;
    lse[r] = m + std::log(l);
  }
}

// Runs the stage's kernel on NaN-poisoned P and LSE and compares them with float64.
void check_softmax(const fa::Problem& p, fa::InputKind kind, std::uint64_t seed) {
  INFO(p.describe() << ", " << fa::to_string(kind) << " inputs");
  const fa::AttentionData in = fa::make_inputs(p, seed, kind);
  const std::vector<float> s = scores(p, in);
  std::vector<double> prob_ref, lse_ref;
  reference(p, s, prob_ref, lse_ref);

  fa::MemoryMeter meter;
  fa::DeviceBuffer<float> s_dev(meter, s.size()), p_dev(meter, s.size()),
      lse_dev(meter, static_cast<std::size_t>(p.lse_elements()));
  s_dev.upload(s.data(), s.size());
  p_dev.poison();
  lse_dev.poison();
  fa::step03::launch_row_softmax(p, s_dev.data(), p_dev.data(), lse_dev.data(), nullptr);
  FA_CUDA_CHECK_LAUNCH();
  std::vector<float> prob(s.size()), lse(static_cast<std::size_t>(p.lse_elements()));
  p_dev.download(prob.data(), prob.size());
  lse_dev.download(lse.data(), lse.size());
  const auto cp = fa::compare("P", prob, prob_ref, fa::kFloat32Tol, fa::index_in({p.batch, p.heads, p.seq_q, p.seq_k}));
  const auto cl = fa::compare("LSE", lse, lse_ref, fa::kFloat32Tol, fa::index_in({p.batch, p.heads, p.seq_q}));
  CHECK_MESSAGE(cp.ok(), cp.summary());
  CHECK_MESSAGE(cl.ok(), cl.summary());
}

}  // namespace

TEST_CASE("ex03 — P = softmax(S) by rows and LSE = m + log(l), against float64") {
  // N = 1, lengths that are no multiple of 32 or 256, Nq != Nk both ways.
  const std::int64_t shapes[][2] = {{1, 1}, {1, 77}, {77, 1}, {77, 129}, {129, 77}};
  std::uint64_t seed = 1;
  for (const auto& s : shapes) check_softmax(problem(s[0], s[1], 16, false), fa::InputKind::normal, ++seed);
}

TEST_CASE("ex03 — causal: only the keys j < keys_visible(i); rows that see no key give P = 0, LSE = -inf") {
  // Nq > Nk: the first Nq - Nk rows see no key. Nq < Nk: every row sees Nk - Nq keys or more.
  const std::int64_t shapes[][2] = {{9, 6}, {77, 129}, {129, 77}, {1, 40}, {40, 1}};
  std::uint64_t seed = 20;
  for (const auto& s : shapes) check_softmax(problem(s[0], s[1], 32, true), fa::InputKind::normal, ++seed);
}

TEST_CASE("ex03 — large scores (50 to 200) do not overflow: subtract the row max first") {
  check_softmax(problem(33, 50, 64, false), fa::InputKind::large_logits, 40);
  check_softmax(problem(50, 33, 64, true), fa::InputKind::large_logits, 41);
}

TEST_CASE("ex03 — rows longer than the block's 256 threads: every thread strides along the row") {
  check_softmax(problem(3, 1000, 16, false), fa::InputKind::normal, 60);
  check_softmax(problem(600, 700, 16, true), fa::InputKind::normal, 61);
}
