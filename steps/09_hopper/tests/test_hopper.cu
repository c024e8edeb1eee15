// Stage 09's five rungs against float64 with the tolerance 16-bit rounding allows
// (docs/tolerance.md), at the awkward shapes (tails of the 128- and 192-row Q tiles and of the 64-
// and 128-key K/V tiles, Nq != Nk both ways, causal with whole tiles that see no key), fp16 and bf16,
// D = 64, 128 and 256 (64-key tiles); against stage 07 on every row; large logits. Needs compute
// capability 9.0 exactly (exit 77 elsewhere).
#include <doctest/doctest.h>

#include <string>
#include <tuple>

#include "07_tensor_cores/tensor_cores.cuh"
#include "09_hopper/hopper.cuh"
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

// The rungs, each checked alike.
struct Rung {
  const char* name;
  fa::DeviceForward forward;
};
const Rung kRungs[] = {{"09 tma_wgmma", fa::step09::attention_forward},
                       {"09 warp_specialized", fa::step09::attention_forward_warp_specialized},
                       {"09 pingpong", fa::step09::attention_forward_pingpong},
                       {"09 overlap", fa::step09::attention_forward_overlap},
                       {"09 persistent", fa::step09::attention_forward_persistent}};

void check_case(const fa::Problem& p, std::uint64_t seed, fa::InputKind kind = fa::InputKind::normal) {
  INFO(p.describe() << " " << fa::to_string(p.dtype));
  const fa::AttentionData in = fa::make_inputs(p, seed, kind);
  for (const Rung& rung : kRungs) {
    INFO(std::string(rung.name));
    const fa::GpuRun r = fa::run_once(p, in, rung.forward);
    CHECK(r.extra_bytes == 0);
    fa::testing::check_verified(p, in, r.out, rung.name);
    if (p.causal) fa::testing::check_empty_rows(p, r.out);
  }
}

}  // namespace

TEST_CASE("stage 09 against float64: N = 1, tails, Nq != Nk both ways, causal, D = 64 and 128, fp16 and bf16") {
  fa::step09::exit_skipped_unless_hopper();
  const fa::testing::Shape shapes[] = {{1, 1, 64},     {1, 77, 128},   {77, 1, 64},     {130, 130, 128},
                                       {129, 300, 64}, {300, 129, 128}, {256, 256, 64}, {200, 520, 128}};
  std::uint64_t seed = 9000;
  for (const fa::DType t : kDtypes)
    for (const auto& s : shapes)
      for (const bool causal : {false, true}) check_case(with_dtype(problem(s.nq, s.nk, s.d, causal), t), ++seed);
}

TEST_CASE("stage 09 at D = 256: tails of the 64-key tiles, Nq != Nk both ways, causal, fp16 and bf16") {
  fa::step09::exit_skipped_unless_hopper();
  const fa::testing::Shape shapes[] = {{1, 1, 256}, {130, 65, 256}, {65, 300, 256}, {256, 256, 256}};
  std::uint64_t seed = 9050;
  for (const fa::DType t : kDtypes)
    for (const auto& s : shapes)
      for (const bool causal : {false, true}) check_case(with_dtype(problem(s.nq, s.nk, s.d, causal), t), ++seed);
  check_case(with_dtype(problem(200, 333, 256, true), fa::DType::bfloat16), ++seed, fa::InputKind::large_logits);
}

TEST_CASE("stage 09 persistent: more work items than SMs, so each block takes several in turn") {
  fa::step09::exit_skipped_unless_hopper();
  // B·H = 2·75 heads × 3 query tiles = 450 work items on at most 132 blocks (D = 64: 2 tiles of
  // 192, 300 items): each block runs several, its stages, mbarrier phases and item slots running
  // on from one to the next; causal with Nq > Nk adds tiles that see no key (no copies; written as
  // zeros). Twice in a row: the counter must start from zero at every launch.
  std::uint64_t seed = 9300;
  for (const fa::DType t : kDtypes)
    for (const std::int64_t d : {64, 128, 256})
      for (const auto& [nq, nk, causal] : {std::tuple{300, 517, false}, std::tuple{300, 129, true}}) {
        const fa::Problem p = with_dtype(problem(nq, nk, d, causal, 2, 75), t);
        INFO(p.describe() << " " << fa::to_string(t));
        const fa::AttentionData in = fa::make_inputs(p, ++seed);
        for (int launch = 0; launch < 2; ++launch) {
          const fa::GpuRun r = fa::run_once(p, in, fa::step09::attention_forward_persistent);
          fa::testing::check_verified(p, in, r.out, "09 persistent");
          if (p.causal) fa::testing::check_empty_rows(p, r.out);
        }
      }
}

TEST_CASE("stage 09 persistent, causal: heads in several groups, the last one short; tiles ending at the last row") {
  fa::step09::exit_skipped_unless_hopper();
  // The host groups the heads so that a group's K and V take about 16 MiB (hopper.cu): 8 MiB a head
  // here (D = 128 at 16k keys, D = 64 at 32k), so 3 heads make a group of 2 and one of 1. Nq = 1000
  // is no multiple of Br (128, or 192 at D = 64): the lightest tile starts above row 0.
  std::uint64_t seed = 9350;
  for (const std::int64_t d : {64, 128}) {
    const fa::Problem p = with_dtype(problem(1000, d == 64 ? 32768 : 16384, d, true, 1, 3), fa::DType::bfloat16);
    INFO(p.describe());
    const fa::AttentionData in = fa::make_inputs(p, ++seed);
    const fa::GpuRun r = fa::run_once(p, in, fa::step09::attention_forward_persistent);
    fa::testing::check_verified(p, in, r.out, "09 persistent");
    fa::testing::check_empty_rows(p, r.out);
  }
}

TEST_CASE("stage 09: large logits (scores of 50 to 200)") {
  fa::step09::exit_skipped_unless_hopper();
  std::uint64_t seed = 9100;
  for (const fa::DType t : kDtypes)
    for (const std::int64_t d : {64, 128})
      for (const bool causal : {false, true})
        check_case(with_dtype(problem(200, 333, d, causal), t), ++seed, fa::InputKind::large_logits);
}

TEST_CASE("stage 09 against stage 07 (mma.sync, the same inputs) on every row") {
  fa::step09::exit_skipped_unless_hopper();
  std::uint64_t seed = 9200;
  for (const fa::DType t : kDtypes)
    for (const std::int64_t d : {64, 128, 256})
      for (const bool causal : {false, true}) {
        const fa::Problem p = with_dtype(problem(300, 517, d, causal), t);
        INFO(p.describe() << " " << fa::to_string(t));
        const fa::AttentionData in = fa::make_inputs(p, ++seed);
        for (const Rung& rung : kRungs) {
          INFO(std::string(rung.name));
          const fa::GpuRun r = fa::run_once(p, in, rung.forward);
          fa::VerifyPlan plan;
          plan.max_full_flops = 1e30;
          plan.previous = fa::PreviousStage{"07 flash", fa::gpu_forward(fa::step07::attention_forward)};
          const fa::Verification v = fa::verify_forward(p, in, r.out, plan, 0);
          for (const fa::CompareReport& c : v.reports) CHECK_MESSAGE(c.ok(), c.summary());
          CHECK_MESSAGE(v.against.find("07 flash (all rows)") != std::string::npos, v.against);
        }
      }
}
