// test_tensor_core_backward.cu — stage 08 on the GPU: dQ, dK, dV (and the forward's O, LSE) against
// the float64 backward with the 16-bit rule (fa/backward.hpp) at awkward shapes, every head dim,
// fp16 and bf16, causal with Nq != Nk both ways; large logits; against stage 06 in float32 on the
// same inputs; the extra memory, measured; refusals. Every run writes into NaN-poisoned buffers.
// The forward is stage 07's (the real pair). Needs a GPU of compute capability 8.0+ (exit 77
// without one).
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "06_cuda_backward/flash_backward.cuh"
#include "08_tensor_core_backward/tensor_core_backward.cuh"
#include "fa/backward.hpp"
#include "fa/cuda/backward/key_tiles.cuh"
#include "fa/cuda/check.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/reference.hpp"
#include "fa/stage.hpp"
#include "fa/testing.hpp"

namespace {

using fa::testing::check_verification;
using fa::testing::problem;
// The per-row arrays (D, LSE·log2e) are padded to this many rows per head: part of the extra memory.
constexpr std::int64_t kPad = fa::bwd::kRowPadding;

enum Report { kDq, kDk, kDv, kO, kLse };

fa::Problem problem16(std::int64_t nq, std::int64_t nk, std::int64_t d, bool causal, std::int64_t b, std::int64_t h,
                      fa::DType type = fa::DType::bfloat16) {
  fa::Problem p = problem(nq, nk, d, causal, b, h);
  p.dtype = type;
  return p;
}

fa::AttentionData inputs(const fa::Problem& p, std::uint64_t seed, fa::InputKind kind = fa::InputKind::normal) {
  return fa::make_case_inputs(p, fa::Pass::backward, seed, kind);
}

fa::DeviceBackward stage08(bool deterministic) {
  return [deterministic](const fa::Problem& p, const fa::AttentionInputs& in, fa::ConstTensorView o,
                         fa::ConstTensorView lse, fa::ConstTensorView d_o, const fa::AttentionGradients& g,
                         fa::DeviceContext& ctx) {
    fa::step08::BackwardOptions options;
    options.deterministic = deterministic;
    fa::step08::attention_backward(p, in, o, lse, d_o, g, ctx, options);
  };
}

fa::GpuRun run(const fa::Problem& p, const fa::AttentionData& data, bool deterministic = false) {
  return fa::run_once(p, data, fa::step08::attention_forward, stage08(deterministic));
}


}  // namespace

TEST_CASE("stage 08 against float64: N = 1, tails, Nq != Nk both ways, causal, every head dim, fp16 and bf16, both dQ modes") {
  struct Shape {
    std::int64_t nq, nk;
  };
  // N = 1; tails that are no multiple of 64; causal Nq > Nk (rows that see no key) and Nq < Nk;
  // whole tiles; a key tail with whole query tiles and the reverse.
  const Shape shapes[] = {{1, 1}, {1, 77}, {77, 1}, {64, 64}, {130, 130}, {200, 67}, {67, 200}, {128, 257}, {257, 128}};
  int cases = 0;
  for (const fa::DType type : {fa::DType::bfloat16, fa::DType::float16})
    for (const std::int64_t d : {32, 64, 96, 128, 256})
      for (const bool causal : {false, true})
        for (const Shape& s : shapes) {
          const fa::Problem p = problem16(s.nq, s.nk, d, causal, 2, 2, type);
          const fa::AttentionData data = inputs(p, 500 + cases);
          const bool deterministic = cases % 2 == 1;  // every other case: both modes see every kind
          check_verification(fa::verify_backward(p, data, run(p, data, deterministic).out, true, 0, 1),
                p.describe() + (deterministic ? " deterministic" : " atomic dQ"));
          ++cases;
        }
  CHECK(cases == 2 * 5 * 2 * 9);
}

TEST_CASE("stage 08 with large logits (scores 50..200) and ramp inputs") {
  for (const bool causal : {false, true})
    for (const std::int64_t d : {64, 128}) {
      const fa::Problem p = problem16(150, 190, d, causal, 1, 3);
      const fa::AttentionData big = inputs(p, 7, fa::InputKind::large_logits);
      check_verification(fa::verify_backward(p, big, run(p, big).out, true, 0, 1), p.describe() + " large logits");
      const fa::AttentionData ramp = inputs(p, 8, fa::InputKind::ramp);
      check_verification(fa::verify_backward(p, ramp, run(p, ramp, true).out, true, 0, 1), p.describe() + " ramp, deterministic");
    }
}

TEST_CASE("stage 08 against stage 06 (float32 on the same inputs), both against float64") {
  for (const bool causal : {false, true})
    for (const std::int64_t d : {64, 128}) {
      const fa::Problem p = problem16(300, 333, d, causal, 2, 2);
      const fa::AttentionData data = inputs(p, 21);
      const fa::GpuRun ours = run(p, data);
      // Stage 05 + stage 06 on the inputs as float32 (exact), the result rounded to bf16.
      fa::Problem p32 = p;
      p32.dtype = fa::DType::float32;
      const fa::DeviceBackward stage06 = [](const fa::Problem& pp, const fa::AttentionInputs& in, fa::ConstTensorView o,
                                            fa::ConstTensorView lse, fa::ConstTensorView d_o,
                                            const fa::AttentionGradients& g, fa::DeviceContext& ctx) {
        fa::step06::attention_backward(pp, in, o, lse, d_o, g, ctx, {});
      };
      const fa::GpuRun theirs32 = fa::run_once(p32, fa::as_float32(data), fa::step06::attention_forward, stage06);
      fa::AttentionResult theirs(p, fa::Pass::backward);
      for (auto [from, to] : {std::pair{&theirs32.out.o, &theirs.o}, std::pair{&theirs32.out.dq, &theirs.dq},
                              std::pair{&theirs32.out.dk, &theirs.dk}, std::pair{&theirs32.out.dv, &theirs.dv}})
        for (std::int64_t i = 0; i < to->numel(); ++i) to->set(i, from->get(i));
      theirs.lse = theirs32.out.lse;
      check_verification(fa::verify_backward(p, data, theirs, true, 0, 1), p.describe() + " stage 06 (float32), rounded");
      // Two results within the 16-bit rule of float64 are within twice it of each other; 5 % of
      // the largest gradient is far above that rule and far below any wrong tile's error.
      const fa::Verification pair = fa::compare_backward(ours.out, theirs, 0.05);
      for (const Report r : {kDq, kDk, kDv}) {
        INFO(p.describe() << ": stage 08 against stage 06: " << pair.reports[r].summary());
        CHECK(pair.reports[r].ok());
      }
    }
}

TEST_CASE("rows that see no key (causal, Nq > Nk) get dQ = 0 and add nothing to dK, dV") {
  fa::testing::check_keyless_rows_backward(
      [](const fa::Problem& p, const fa::AttentionData& data) { return run(p, data).out; });
}

TEST_CASE("sampled-row verification at the executable's size, causal") {
  const fa::Problem p = problem16(2000, 2000, 128, true, 2, 4);
  const fa::AttentionData data = inputs(p, 5);
  const fa::Verification v = fa::verify_backward(p, data, run(p, data).out, false, 24, 5);
  check_verification(v, p.describe() + " sampled");
  CHECK(v.reports[kDq].count >= 2 * 24 * 128);
}

TEST_CASE("memory: the dQ accumulator (atomic mode) and two floats per (padded) query row, measured; nothing N×N") {
  for (const std::int64_t n : {500, 1000, 2000}) {
    const fa::Problem p = problem16(n, n, 64, true, 1, 4);
    const fa::AttentionData data = inputs(p, 2);
    const std::int64_t padded = (n + kPad - 1) / kPad * kPad, rows = 2 * p.heads_total() * padded * 4;
    const fa::GpuRun r = run(p, data), det = run(p, data, true);
    MESSAGE("N=" << n << ": extra memory " << r.extra_bytes << " B (dQ accumulator + D + LSE·log2e: "
                 << p.q_elements() * 4 + rows << " B); deterministic " << det.extra_bytes << " B");
    CHECK(r.extra_bytes == p.q_elements() * 4 + rows);
    CHECK(det.extra_bytes == rows);
  }
}

TEST_CASE("--deterministic: dQ is bitwise identical run to run; dK, dV are the same in both modes") {
  for (const bool causal : {false, true}) {
    const fa::Problem p = problem16(700, 900, 128, causal, 1, 4);
    const fa::AttentionData data = inputs(p, 44);
    const fa::GpuRun a = run(p, data, true), b = run(p, data, true), atomic = run(p, data, false);
    int dq_differ = 0, dkdv_differ = 0;
    for (std::int64_t i = 0; i < a.out.dq.numel(); ++i) dq_differ += a.out.dq.get(i) != b.out.dq.get(i);
    for (std::int64_t i = 0; i < a.out.dk.numel(); ++i)
      dkdv_differ += (a.out.dk.get(i) != atomic.out.dk.get(i)) + (a.out.dv.get(i) != atomic.out.dv.get(i));
    CHECK(dq_differ == 0);
    CHECK(dkdv_differ == 0);
    check_verification(fa::verify_backward(p, data, a.out, true, 0, 1), p.describe() + " deterministic");
  }
}

TEST_CASE("stage 08 refuses what it does not run, with one line") {
  for (const std::int64_t d : {48, 80}) {
    const fa::Problem p = problem16(8, 8, d, false, 1, 1);
    const fa::AttentionData data = inputs(p, 1);
    const fa::DeviceForward none = [](const fa::Problem&, const fa::AttentionInputs&, const fa::AttentionOutputs&,
                                      fa::DeviceContext&) {};
    CHECK_THROWS_AS(fa::run_once(p, data, none, stage08(false)), fa::UsageError);
  }
  const fa::Problem p32 = problem(8, 8, 64, false, 1, 1);
  const fa::AttentionData data = fa::make_case_inputs(p32, fa::Pass::backward, 1, fa::InputKind::normal);
  const fa::DeviceForward none = [](const fa::Problem&, const fa::AttentionInputs&, const fa::AttentionOutputs&,
                                    fa::DeviceContext&) {};
  CHECK_THROWS_AS(fa::run_once(p32, data, none, stage08(true)), fa::UsageError);
}

TEST_CASE("a dK that is never written fails the verification (the check can fail)") {
  const fa::Problem p = problem16(70, 70, 64, true, 1, 2);
  const fa::AttentionData data = inputs(p, 9);
  const fa::DeviceBackward skips_dk = [](const fa::Problem& pp, const fa::AttentionInputs& in, fa::ConstTensorView o,
                                         fa::ConstTensorView lse, fa::ConstTensorView d_o,
                                         const fa::AttentionGradients& g, fa::DeviceContext& ctx) {
    fa::step08::attention_backward(pp, in, o, lse, d_o, g, ctx);
    FA_CUDA_CHECK(cudaMemset(g.dk.data, 0xFF, g.dk.bytes()));  // NaN again, as if skipped
  };
  const fa::Verification v =
      fa::verify_backward(p, data, fa::run_once(p, data, fa::step08::attention_forward, skips_dk).out, true, 0, 1);
  CHECK_FALSE(v.reports[kDk].ok());
  CHECK(v.reports[kDq].ok());
}
