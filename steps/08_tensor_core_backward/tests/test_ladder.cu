// Stage 08's ladder (ladder/ladder.cuh): every rung's dQ, dK, dV against the float64 backward with
// the 16-bit rule (fa/backward.hpp), and against the rung below it on every element (both are
// within the float64 bound, so within twice it of each other), at tails, Nq != Nk both ways, causal
// on and off (rows that see no key included), D = 64 and 128, fp16 and bf16, all rungs on the same
// inputs. Every run writes into NaN-poisoned buffers; the forward is stage 07's. Needs a GPU of
// compute capability 8.0+ (exit 77 without one).
#include <doctest/doctest.h>

#include <algorithm>
#include <iterator>
#include <optional>
#include <string>
#include <utility>

#include "08_tensor_core_backward/ladder/ladder.cuh"
#include "fa/backward.hpp"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/stage.hpp"
#include "fa/testing.hpp"

namespace {

using fa::step08::ladder::kLadder;
constexpr int kRungs = static_cast<int>(std::size(kLadder));

fa::DeviceBackward rung(int k) { return kLadder[k].backward; }

void check(const fa::Verification& v, const std::string& what) {
  std::string reports;
  for (const fa::CompareReport& r : v.reports) reports += "\n  " + r.summary();
  INFO(what << " (" << v.how << ")" << reports);
  CHECK(v.ok());
}

// dQ, dK, dV of a rung against the rung below, every element, with twice the tolerance that the
// float64 check (v, on every row) gave each of them.
void check_against_below(const fa::Verification& v, const fa::AttentionResult& got, const fa::AttentionResult& below,
                         const std::string& what) {
  const std::pair<const char*, const fa::HostTensor*> grads[] = {
      {"dQ", &got.dq}, {"dK", &got.dk}, {"dV", &got.dv}};
  const std::pair<const char*, const fa::HostTensor*> grads_below[] = {
      {"dQ", &below.dq}, {"dK", &below.dk}, {"dV", &below.dv}};
  for (int n = 0; n < 3; ++n) {
    const auto report = std::find_if(v.reports.begin(), v.reports.end(),
                                     [&](const fa::CompareReport& r) { return r.name == grads[n].first; });
    REQUIRE(report != v.reports.end());
    const fa::Tolerance twice{2 * report->tol.atol, 2 * report->tol.rtol};
    const fa::CompareReport r = fa::compare(std::string(grads[n].first) + " vs the rung below", grads[n].second->to_float(),
                                            grads_below[n].second->to_float(), twice);
    INFO(what << ": " << r.summary());
    CHECK(r.ok());
  }
}

}  // namespace

TEST_CASE("the ladder: v1_mma .. v7_named_barrier, then the stage's kernel `flash` on top, against float64 and the rung below") {
  struct Shape {
    std::int64_t nq, nk, d;
  };
  const Shape shapes[] = {{1, 1, 64}, {77, 130, 128}, {130, 77, 64}, {200, 200, 128}, {64, 257, 64}};
  std::uint64_t seed = 80;
  for (const fa::DType t : {fa::DType::bfloat16, fa::DType::float16})
    for (const Shape& s : shapes)
      for (const bool causal : {false, true}) {
        fa::Problem p = fa::testing::problem(s.nq, s.nk, s.d, causal, 2, 2);
        p.dtype = t;
        const fa::AttentionData data = fa::make_case_inputs(p, fa::Pass::backward, ++seed, fa::InputKind::normal);
        std::optional<fa::AttentionResult> below;
        for (int k = 0; k < kRungs; ++k) {
          const std::string what = std::string(kLadder[k].name) + ": " + p.describe() + " " + fa::to_string(t);
          fa::GpuRun r = fa::run_once(p, data, fa::step08::attention_forward, rung(k));
          const fa::Verification v = fa::verify_backward(p, data, r.out, true, 0, 1);
          check(v, what);
          if (below) check_against_below(v, r.out, *below, what);
          below = std::move(r.out);
        }
      }
}

TEST_CASE("the ladder's rungs refuse the head dims only the stage's kernel runs, with one line") {
  for (const std::int64_t d : {32, 96, 256}) {
    fa::Problem p = fa::testing::problem(64, 64, d, false, 1, 1);
    p.dtype = fa::DType::bfloat16;
    const fa::AttentionData data = fa::make_case_inputs(p, fa::Pass::backward, 5, fa::InputKind::normal);
    for (int k = 0; k + 1 < kRungs; ++k)
      CHECK_THROWS_AS(fa::run_once(p, data, fa::step08::attention_forward, rung(k)), fa::UsageError);
  }
}
