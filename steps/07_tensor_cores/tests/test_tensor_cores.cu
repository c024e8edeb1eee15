// Stage 07 against float64 with the tolerance 16-bit rounding allows (docs/tolerance.md: a small
// multiple of a plain implementation's error on the same inputs), at the awkward shapes, in fp16
// and bf16, every head dim it runs; against stage 05 (float32) on every row; the heaviest-first
// order against the natural one (bitwise); and the refusals.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "07_tensor_cores/stage05_float32.cuh"
#include "07_tensor_cores/tensor_cores.cuh"
#include "fa/compare.hpp"
#include "fa/random.hpp"
#include "fa/testing.hpp"

namespace {

using fa::testing::problem;
constexpr fa::DType kDtypes[] = {fa::DType::bfloat16, fa::DType::float16};

fa::Problem with_dtype(fa::Problem p, fa::DType t) {
  p.dtype = t;
  return p;
}

// Our kernel on one case: every row against float64 (all elements), rows that see no key exactly
// O = 0 and LSE = −inf, nothing allocated beyond the tensors.
void check_case(const fa::Problem& p, std::uint64_t seed, fa::InputKind kind = fa::InputKind::normal) {
  INFO(p.describe() << " " << fa::to_string(p.dtype));
  const fa::AttentionData in = fa::make_inputs(p, seed, kind);
  const fa::GpuRun r = fa::run_once(p, in, fa::step07::attention_forward);
  CHECK(r.extra_bytes == 0);
  fa::testing::check_verified(p, in, r.out, "07 flash");
  if (p.causal) fa::testing::check_empty_rows(p, r.out);
}

}  // namespace

TEST_CASE("stage 07 against float64: N = 1, tails, Nq != Nk both ways, causal, every head dim, fp16 and bf16") {
  // Tiles are Br = 128 (D = 256: 64) query rows and Bc = 64 (32) keys: these lengths leave every
  // kind of remainder, and with causal and Nq > Nk whole Q tiles see no key.
  const fa::testing::Shape shapes[] = {{1, 1, 64},    {1, 77, 128},   {77, 1, 64},   {130, 130, 128}, {129, 300, 64},
                                       {300, 129, 128}, {200, 33, 32}, {33, 200, 96}, {65, 257, 256}, {257, 65, 256},
                                       {150, 150, 96},  {64, 64, 32}};
  std::uint64_t seed = 700;
  for (const fa::DType t : kDtypes)
    for (const auto& s : shapes)
      for (const bool causal : {false, true}) check_case(with_dtype(problem(s.nq, s.nk, s.d, causal), t), ++seed);
}

TEST_CASE("stage 07: large logits (scores of 50 to 200) and a large scale") {
  std::uint64_t seed = 800;
  for (const fa::DType t : kDtypes)
    for (const std::int64_t d : {64, 128})
      for (const bool causal : {false, true})
        check_case(with_dtype(problem(200, 333, d, causal), t), ++seed, fa::InputKind::large_logits);
  fa::Problem p = with_dtype(problem(100, 100, 64, true), fa::DType::float16);
  p.scale = 4.0f;
  check_case(p, 850);
}

TEST_CASE("stage 07 against stage 05 (float32 on the same inputs) on every row") {
  std::uint64_t seed = 900;
  for (const fa::DType t : kDtypes)
    for (const std::int64_t d : {32, 64, 128})
      for (const bool causal : {false, true}) {
        const fa::Problem p = with_dtype(problem(300, 517, d, causal), t);
        INFO(p.describe() << " " << fa::to_string(t));
        const fa::AttentionData in = fa::make_inputs(p, ++seed);
        const fa::GpuRun r = fa::run_once(p, in, fa::step07::attention_forward);
        fa::VerifyPlan plan;
        plan.max_full_flops = 1e30;
        plan.previous = fa::PreviousStage{"05 (float32)", fa::step07::stage05_reference()};
        const fa::Verification v = fa::verify_forward(p, in, r.out, plan, 0);
        for (const fa::CompareReport& c : v.reports) CHECK_MESSAGE(c.ok(), c.summary());
        CHECK_MESSAGE(v.against.find("05 (float32) (all rows)") != std::string::npos, v.against);
      }
}

TEST_CASE("stage 07: the heaviest causal tiles first changes the order, not one bit") {
  // Each block computes its Q tile with the same instructions in either order.
  for (const fa::DType t : kDtypes) {
    const fa::Problem p = with_dtype(problem(700, 900, 64, true), t);
    const fa::AttentionData in = fa::make_inputs(p, 950);
    const fa::GpuRun a = fa::run_once(p, in, fa::step07::attention_forward);
    const fa::GpuRun b = fa::run_once(p, in, fa::step07::attention_forward_in_order);
    CHECK(std::memcmp(a.out.o.raw(), b.out.o.raw(), a.out.o.bytes()) == 0);
    CHECK(std::memcmp(a.out.lse.raw(), b.out.lse.raw(), a.out.lse.bytes()) == 0);
  }
}

TEST_CASE("stage 07 refuses what it does not run, with one line") {
  fa::Problem p = problem(64, 64, 64, false);
  const fa::AttentionData in32 = fa::make_inputs(p, 1);
  CHECK_THROWS_AS(fa::run_once(p, in32, fa::step07::attention_forward), fa::UsageError);  // float32
  p = with_dtype(problem(64, 64, 80, false), fa::DType::bfloat16);
  CHECK_THROWS_AS(fa::run_once(p, fa::make_inputs(p, 2), fa::step07::attention_forward), fa::UsageError);  // D = 80
  p = with_dtype(problem(64, 64, 64, false), fa::DType::bfloat16);
  p.heads_kv = 1;  // grouped heads: stage 11
  CHECK_THROWS_AS(fa::run_once(p, fa::make_inputs(p, 3), fa::step07::attention_forward), fa::UsageError);
}
