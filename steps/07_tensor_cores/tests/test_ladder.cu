// Stage 07's ladder (ladder/ladder.cuh): every rung against float64 (the tolerance of
// docs/tolerance.md) and against the rung below it on every row, at tails, Nq != Nk both ways,
// causal on and off, D = 64 and 128, fp16 and bf16. v1's rung below is stage 05 in float32.
#include <doctest/doctest.h>

#include <iterator>
#include <string>

#include "07_tensor_cores/ladder/ladder.cuh"
#include "07_tensor_cores/stage05_float32.cuh"
#include "fa/random.hpp"
#include "fa/testing.hpp"

namespace {

using fa::step07::ladder::kLadder;
using fa::testing::problem;
constexpr int kRungs = static_cast<int>(std::size(kLadder));

void check_rung(int k, const fa::Problem& p, const fa::AttentionData& in) {
  const char* name = kLadder[k].name;
  INFO(name << ": " << p.describe() << " " << fa::to_string(p.dtype));
  const fa::GpuRun r = fa::run_once(p, in, kLadder[k].forward);
  CHECK(r.extra_bytes == 0);
  fa::VerifyPlan plan;
  plan.max_full_flops = 1e30;
  plan.previous = k == 0 ? fa::PreviousStage{"05 (float32)", fa::step07::stage05_reference()}
                         : fa::PreviousStage{std::string("07 ") + kLadder[k - 1].name, fa::gpu_forward(kLadder[k - 1].forward)};
  const fa::Verification v = fa::verify_forward(p, in, r.out, plan, 0);
  for (const fa::CompareReport& c : v.reports) CHECK_MESSAGE(c.ok(), name << ": " << c.summary());
  CHECK_MESSAGE(v.against.find(plan.previous->name + " (all rows)") != std::string::npos, v.against);
  if (p.causal) fa::testing::check_empty_rows(p, r.out);
}

}  // namespace

TEST_CASE("the ladder: v1_mma .. v5_addresses, then the stage's kernel `flash` on top") {
  const fa::testing::Shape shapes[] = {{1, 1, 64}, {77, 130, 128}, {130, 77, 64}, {200, 200, 128}};
  std::uint64_t seed = 70;
  for (const fa::DType t : {fa::DType::bfloat16, fa::DType::float16})
    for (const auto& s : shapes)
      for (const bool causal : {false, true}) {
        fa::Problem p = problem(s.nq, s.nk, s.d, causal);
        p.dtype = t;
        const fa::AttentionData in = fa::make_inputs(p, ++seed);
        for (int k = 0; k < kRungs; ++k) check_rung(k, p, in);
      }
}

TEST_CASE("the ladder's rungs refuse the head dims only the stage's kernel runs") {
  fa::Problem p = problem(64, 64, 96, false);
  p.dtype = fa::DType::bfloat16;
  const fa::AttentionData in = fa::make_inputs(p, 5);
  for (int k = 0; k + 1 < kRungs; ++k)
    CHECK_THROWS_AS(fa::run_once(p, in, kLadder[k].forward), fa::UsageError);
}
