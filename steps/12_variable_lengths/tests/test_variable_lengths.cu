// Stage 12's prefill against float64 with the tolerance 16-bit rounding allows (docs/tolerance.md):
// grouped heads (G = 1, 3, 4, 6; multi-query), Nq = Nk, Nq < Nk and Nq > Nk, every head dim, fp16 and
// bf16, causal with rows that see no key; bit for bit the same kernel on K/V repeated to Hq (it
// reads the same values in the same order). Packed batches: each sequence against float64 alone,
// and bit for bit what the kernel gives that sequence alone.
#include <doctest/doctest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "09_hopper/hopper.cuh"
#include "12_variable_lengths/12_variable_lengths.cuh"
#include "fa/cuda/stage_arch.cuh"
#include "fa/packed.hpp"
#include "fa/random.hpp"
#include "fa/testing.hpp"

namespace {

constexpr fa::DType kDtypes[] = {fa::DType::bfloat16, fa::DType::float16};

fa::Problem prefill_problem(std::int64_t nq, std::int64_t nk, std::int64_t d, bool causal, std::int64_t heads,
                            std::int64_t heads_kv, fa::DType t, std::int64_t batch = 2) {
  fa::Problem p = fa::testing::problem(nq, nk, d, causal, batch, heads);
  p.heads_kv = heads_kv;
  p.dtype = t;
  return p;
}

struct Heads {  // query heads on K/V heads: Hq, Hkv
  std::int64_t q, kv;
};

void skip_without_gpu() { fa::exit_skipped_below(fa::kStageMinComputeCapability); }

}  // namespace

TEST_CASE("grouped-query prefill against float64, and bitwise equal to the same kernel on K/V repeated to Hq") {
  skip_without_gpu();
  // On compute capability 9.0 this is stage 09's kernel reading K/V head bh / G: the multi-head
  // run on repeated K/V computes with the same values in the same order, so O and LSE must match
  // to the bit. Elsewhere both run stage 07 on repeated heads (equal trivially).
  const Heads heads[] = {{8, 2}, {4, 4}, {6, 1}, {12, 3}};
  std::uint64_t seed = 11000;
  for (const fa::DType t : kDtypes)
    for (const std::int64_t d : {64, 128, 256})
      for (const Heads h : heads)
        for (const auto& [nq, nk] : {std::pair<std::int64_t, std::int64_t>{77, 77}, {1000, 1000}, {300, 1100}, {513, 200}})
          for (const bool causal : {false, true}) {
            if (d == 256 && nq > 500) continue;  // D = 256 is checked for correctness, on the short shapes
            const fa::Problem p = prefill_problem(nq, nk, d, causal, h.q, h.kv, t);
            INFO(p.describe() << " " << fa::to_string(p.dtype) << " (stage " << fa::step09::fastest_forward_stage() << ")");
            const fa::AttentionData in = fa::make_inputs(p, ++seed);
            const fa::GpuRun grouped = fa::run_once(p, in, fa::step12::attention_forward_prefill);
            fa::testing::check_verified(p, in, grouped.out, "12 prefill");
            if (p.causal) fa::testing::check_empty_rows(p, grouped.out);
            const fa::GpuRun repeated = fa::run_once(p, in, fa::step12::attention_forward_prefill_repeated);
            CHECK(grouped.out.o.to_float() == repeated.out.o.to_float());
            CHECK(grouped.out.lse.to_float() == repeated.out.lse.to_float());
            if (fa::step12::runs_on_hopper()) CHECK(grouped.extra_bytes == 0);  // nothing repeated
          }
}

TEST_CASE("packed prefill: each sequence against float64 alone, and bitwise what the kernel gives it alone") {
  skip_without_gpu();
  if (!fa::step12::runs_on_hopper()) {
    MESSAGE("packed prefill runs on stage 09's kernel (compute capability 9.0): not checked on this GPU");
    return;
  }
  // Lengths off every tile (1, 77, 300), a tile exactly (128), longer than the others (513): the
  // grid covers the longest, shorter sequences' extra blocks return; a K/V tile past a sequence's
  // end holds the next sequence's rows, which the mask must hide.
  const std::vector<std::int64_t> lens = {77, 1, 300, 128, 513};
  std::uint64_t seed = 11500;
  for (const fa::DType t : kDtypes)
    for (const std::int64_t d : {64, 128})
      for (const auto& [hq, hkv] : {std::pair<std::int64_t, std::int64_t>{8, 2}, {4, 4}})
        for (const bool causal : {false, true}) {
          fa::Problem base = prefill_problem(1, 1, d, causal, hq, hkv, t, 1);
          const fa::Problem p = fa::packed_problem(base, lens);
          INFO(p.describe() << " " << fa::to_string(t));
          const fa::AttentionData in = fa::make_inputs(p, ++seed);
          const fa::GpuRun packed = fa::run_once(p, in, fa::step12::attention_forward_prefill);
          fa::testing::check_verified(p, in, packed.out, "12 prefill (packed)");
          for (std::int64_t s = 0; s < p.batch; ++s) {
            const fa::Problem one = fa::sequence_problem(p, s);
            const fa::GpuRun alone = fa::run_once(one, fa::sequence_inputs(p, in, s), fa::step12::attention_forward_prefill);
            const fa::AttentionResult mine = fa::sequence_result(p, packed.out, s);
            CAPTURE(s);
            CHECK(mine.o.to_float() == alone.out.o.to_float());
            CHECK(mine.lse.to_float() == alone.out.lse.to_float());
          }
        }
}
