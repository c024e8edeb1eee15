// test_hopper_backward.cu — stage 10 on the GPU: dQ, dK, dV against the float64 backward with the
// 16-bit rule (fa/backward.hpp) at awkward shapes (N = 1, tails of both tile sizes, Nq != Nk both
// ways, causal rows that see no key), D = 64, 128 and 256, fp16 and bf16, every rung; large
// logits; against stage 08 on the same inputs; the extra memory, measured; refusals; and a check
// that can fail. Every run writes into NaN-poisoned buffers. The forward is stage 09's (the real pair). Needs a GPU of
// compute capability 9.0 exactly (exit 77 elsewhere).
#include <doctest/doctest.h>

#include <string>
#include <utility>

#include "08_tensor_core_backward/tensor_core_backward.cuh"
#include "09_hopper/hopper.cuh"
#include "10_hopper_backward/hopper_backward.cuh"
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

fa::GpuRun run(const fa::Problem& p, const fa::AttentionData& data) {
  return fa::run_once(p, data, fa::step10::attention_forward, fa::step10::attention_backward);
}

fa::GpuRun run_stage08(const fa::Problem& p, const fa::AttentionData& data) {
  const fa::DeviceBackward stage08 = [](const fa::Problem& pp, const fa::AttentionInputs& in, fa::ConstTensorView o,
                                        fa::ConstTensorView lse, fa::ConstTensorView d_o,
                                        const fa::AttentionGradients& g, fa::DeviceContext& ctx) {
    fa::step08::attention_backward(pp, in, o, lse, d_o, g, ctx);
  };
  return fa::run_once(p, data, fa::step08::attention_forward, stage08);
}

// One rung of the ladder as a fa::DeviceBackward.
fa::DeviceBackward rung_backward(fa::step10::Rung rung) {
  return [rung](const fa::Problem& pp, const fa::AttentionInputs& in, fa::ConstTensorView o, fa::ConstTensorView lse,
                fa::ConstTensorView d_o, const fa::AttentionGradients& g, fa::DeviceContext& ctx) {
    fa::step10::attention_backward_rung(rung, pp, in, o, lse, d_o, g, ctx);
  };
}


}  // namespace

TEST_CASE("stage 10 against float64: N = 1, tails, Nq != Nk both ways, causal, D = 64 and 128, fp16 and bf16") {
  fa::step09::exit_skipped_unless_hopper();
  struct Shape {
    std::int64_t nq, nk;
  };
  // N = 1; tails that are no multiple of 64 or of 128 (the key tile); causal Nq > Nk (rows that
  // see no key) and Nq < Nk; whole tiles; a key tail with whole query tiles and the reverse; more
  // than two query tiles per key tile (the Q/dO buffers' phases wrap).
  const Shape shapes[] = {{1, 1}, {1, 77}, {77, 1}, {64, 64}, {130, 130}, {200, 67}, {67, 200}, {128, 257}, {257, 128},
                          {333, 129}};
  int cases = 0;
  for (const fa::DType type : {fa::DType::bfloat16, fa::DType::float16})
    for (const std::int64_t d : {64, 128})
      for (const bool causal : {false, true})
        for (const Shape& s : shapes) {
          const fa::Problem p = problem16(s.nq, s.nk, d, causal, 2, 2, type);
          const fa::AttentionData data = inputs(p, 600 + cases);
          check_verification(fa::verify_backward(p, data, run(p, data).out, true, 0, 1), p.describe());
          ++cases;
        }
  CHECK(cases == 2 * 2 * 2 * 10);
}

TEST_CASE("the other rungs against float64: tails, Nq != Nk, causal, both head dims") {
  fa::step09::exit_skipped_unless_hopper();
  // Rung 1 (LSE and D from global memory), rung 3 (dQ added by the TMA: tails of the last query
  // tile clipped by the TMA, more than two query tiles per key tile so that dQ's two buffers are
  // each reused, D = 64's two partial tiles), rung 4 (each warpgroup's own dQ buffer reused at
  // every tile, the Q/dO stages released warp by warp and loaded by the last), rung 5 (dS by
  // stmatrix: a misplaced tile shows in dQ alone), rung 6 (at D = 64 key tiles of 192: Nk = 450
  // is two whole tiles and a tail), rung 7 (a warpgroup's own barrier mid-step at D = 64) and
  // rung 8 (at D = 64 query tiles of 128: Nq = 333 is two whole tiles and a tail, dQ by row blocks),
  // rung 9 (P by ex2.approx), rung 10 (dK's products behind dQ's), rung 11 (dV's before dS) and
  // rung 12 (at D = 128 query tiles of 80: Nq = 333 is four whole tiles and a tail, dQ transposed
  // through one buffer reused at every tile), rung 13 (causal, two heads: one group, partial) and
  // rung 14 (no mask: a grid this small is split into pieces on the GPU's own count of SMs).
  int cases = 0;
  for (const fa::step10::Rung rung : {fa::step10::Rung::wgmma, fa::step10::Rung::dq_by_tma, fa::step10::Rung::own_dq,
                                      fa::step10::Rung::ds_by_stmatrix, fa::step10::Rung::three_groups,
                                      fa::step10::Rung::group_barrier, fa::step10::Rung::wide_query_tiles,
                                      fa::step10::Rung::fast_exp, fa::step10::Rung::dq_before_dk,
                                      fa::step10::Rung::dv_early, fa::step10::Rung::tiles_of_80,
                                      fa::step10::Rung::heavy_first, fa::step10::Rung::split_tail}) {
    const fa::DeviceBackward backward = [rung](const fa::Problem& pp, const fa::AttentionInputs& in,
                                               fa::ConstTensorView o, fa::ConstTensorView lse, fa::ConstTensorView d_o,
                                               const fa::AttentionGradients& g, fa::DeviceContext& ctx) {
      fa::step10::attention_backward_rung(rung, pp, in, o, lse, d_o, g, ctx);
    };
    for (const std::int64_t d : {64, 128})
      for (const bool causal : {false, true})
        for (const auto& [nq, nk] :
             {std::pair<std::int64_t, std::int64_t>{77, 1}, {130, 130}, {200, 67}, {333, 129}, {150, 450}}) {
          const fa::Problem p = problem16(nq, nk, d, causal, 2, 2, d == 64 ? fa::DType::float16 : fa::DType::bfloat16);
          const fa::AttentionData data = inputs(p, 700 + cases);
          const fa::GpuRun r = fa::run_once(p, data, fa::step10::attention_forward, backward);
          const char* name = rung == fa::step10::Rung::wgmma       ? "rung 1 "
                             : rung == fa::step10::Rung::dq_by_tma ? "rung 3 "
                             : rung == fa::step10::Rung::own_dq    ? "rung 4 "
                             : rung == fa::step10::Rung::ds_by_stmatrix ? "rung 5 "
                             : rung == fa::step10::Rung::three_groups   ? "rung 6 "
                             : rung == fa::step10::Rung::group_barrier  ? "rung 7 "
                             : rung == fa::step10::Rung::wide_query_tiles ? "rung 8 "
                             : rung == fa::step10::Rung::fast_exp       ? "rung 9 "
                             : rung == fa::step10::Rung::dq_before_dk   ? "rung 10 "
                             : rung == fa::step10::Rung::dv_early       ? "rung 11 "
                             : rung == fa::step10::Rung::tiles_of_80    ? "rung 12 "
                             : rung == fa::step10::Rung::heavy_first    ? "rung 13 "
                                                                        : "rung 14 ";
          check_verification(fa::verify_backward(p, data, r.out, true, 0, 1), name + p.describe());
          ++cases;
        }
  }
  CHECK(cases == 260);
}

TEST_CASE("grouped heads against float64: dK, dV summed over each group (G = 2, 3 and Hkv = 1)") {
  fa::step09::exit_skipped_unless_hopper();
  struct Heads {
    std::int64_t hq, hkv;
  };
  int cases = 0;
  for (const Heads& h : {Heads{4, 2}, Heads{6, 2}, Heads{3, 1}})
    for (const std::int64_t d : {64, 128})
      for (const bool causal : {false, true})
        for (const auto& [nq, nk] : {std::pair<std::int64_t, std::int64_t>{77, 130}, {200, 67}}) {
          fa::Problem p = problem16(nq, nk, d, causal, 2, h.hq, cases % 2 ? fa::DType::float16 : fa::DType::bfloat16);
          p.heads_kv = h.hkv;
          const fa::AttentionData data = inputs(p, 800 + cases);
          check_verification(fa::verify_backward(p, data, run(p, data).out, true, 0, 1), p.describe());
          // Rungs 4 to 14 too (rung 4: a warpgroup walks the group's heads on its own; rung 14: a
          // piece's share of the walk may end in the middle of a head).
          for (const auto& [rung, name] : {std::pair{fa::step10::Rung::own_dq, "rung 4 "},
                                           std::pair{fa::step10::Rung::ds_by_stmatrix, "rung 5 "},
                                           std::pair{fa::step10::Rung::three_groups, "rung 6 "},
                                           std::pair{fa::step10::Rung::group_barrier, "rung 7 "},
                                           std::pair{fa::step10::Rung::wide_query_tiles, "rung 8 "},
                                           std::pair{fa::step10::Rung::fast_exp, "rung 9 "},
                                           std::pair{fa::step10::Rung::dq_before_dk, "rung 10 "},
                                           std::pair{fa::step10::Rung::dv_early, "rung 11 "},
                                           std::pair{fa::step10::Rung::tiles_of_80, "rung 12 "},
                                           std::pair{fa::step10::Rung::heavy_first, "rung 13 "},
                                           std::pair{fa::step10::Rung::split_tail, "rung 14 "}}) {
            const fa::GpuRun r = fa::run_once(p, data, fa::step10::attention_forward, rung_backward(rung));
            check_verification(fa::verify_backward(p, data, r.out, true, 0, 1), name + p.describe());
          }
          ++cases;
        }
  CHECK(cases == 3 * 2 * 2 * 2);
}

TEST_CASE("the stage's kernel (heavy first under the mask) over several groups of heads: every key tile, causal") {
  fa::step09::exit_skipped_unless_hopper();
  // B · Hkv = 10 and 9 K/V heads: groups of four, four and a last one of two or one; grouped heads
  // (G = 2) and not; Nq != Nk both ways; the same problems with index order (rung 12) beside.
  int cases = 0;
  for (const auto& [hq, hkv] : {std::pair<std::int64_t, std::int64_t>{10, 5}, {9, 9}})
    for (const std::int64_t d : {64, 128})
      for (const auto& [nq, nk] : {std::pair<std::int64_t, std::int64_t>{333, 200}, {200, 450}}) {
        const fa::DType type = d == 64 ? fa::DType::float16 : fa::DType::bfloat16;
        fa::Problem p = problem16(nq, nk, d, true, hkv == 5 ? 2 : 1, hq, type);
        p.heads_kv = hkv;
        const fa::AttentionData data = inputs(p, 900 + cases);
        check_verification(fa::verify_backward(p, data, run(p, data).out, true, 0, 1), "stage " + p.describe());
        const fa::GpuRun r =
            fa::run_once(p, data, fa::step10::attention_forward, rung_backward(fa::step10::Rung::tiles_of_80));
        check_verification(fa::verify_backward(p, data, r.out, true, 0, 1), "rung 12 " + p.describe());
        ++cases;
      }
  CHECK(cases == 8);
}

TEST_CASE("rung 14 with the last wave split as on a full GPU: whole tiles and pieces, against float64") {
  fa::step09::exit_skipped_unless_hopper();
  // As if 10 or 14 blocks were resident at once, so that a small grid has whole waves and a split
  // tail: B · Hkv = 2 · 3 K/V heads of 6 key tiles (Nk = 700, the last a tail), 36 tiles; the walks
  // 5 query tiles (Nq = 333 at D = 128, 80 rows) or 3 (D = 64, 128 rows) long, times G = 2 query
  // heads. The plan (tail_split.hpp) splits the last 6 or 8 tiles into 5 pieces of 2 steps at
  // D = 128 and 3 of 2 at D = 64, so that a piece ends in the middle of a head. Without the mask
  // (split) and with it (not split, the same launch otherwise).
  int cases = 0;
  for (const int slots : {10, 14})
    for (const std::int64_t d : {64, 128})
      for (const bool causal : {false, true}) {
        fa::Problem p = problem16(333, 700, d, causal, 2, 6, d == 64 ? fa::DType::float16 : fa::DType::bfloat16);
        p.heads_kv = 3;
        const fa::AttentionData data = inputs(p, 950 + cases);
        fa::step10::set_tail_slots_for_testing(slots);
        const fa::GpuRun r =
            fa::run_once(p, data, fa::step10::attention_forward, rung_backward(fa::step10::Rung::split_tail));
        fa::step10::set_tail_slots_for_testing(0);
        check_verification(fa::verify_backward(p, data, r.out, true, 0, 1),
                           "rung 14, " + std::to_string(slots) + " resident, " + p.describe());
        ++cases;
      }
  CHECK(cases == 8);
}

TEST_CASE("D = 256 (the stage's kernel there) against float64: tails, Nq != Nk, causal, grouped heads") {
  fa::step09::exit_skipped_unless_hopper();
  // Key tiles of 64 here: tails of 64, more than one query tile per key tile (the one Q/dO stage
  // and dQ's one buffer reused), causal rows that see no key, and a group of two query heads.
  int cases = 0;
  for (const fa::DType type : {fa::DType::bfloat16, fa::DType::float16})
    for (const bool causal : {false, true})
      for (const auto& [nq, nk] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {77, 130}, {200, 67}, {129, 333}}) {
        fa::Problem p = problem16(nq, nk, 256, causal, 2, 2, type);
        if (cases % 3 == 2) {
          p.heads = 4;
          p.heads_kv = 2;
        }
        const fa::AttentionData data = inputs(p, 1000 + cases);
        check_verification(fa::verify_backward(p, data, run(p, data).out, true, 0, 1), p.describe());
        ++cases;
      }
  CHECK(cases == 16);
}

TEST_CASE("the deterministic variant: correct, and the same dQ bit for bit on every run") {
  fa::step09::exit_skipped_unless_hopper();
  const fa::DeviceBackward ordered = [](const fa::Problem& pp, const fa::AttentionInputs& in, fa::ConstTensorView o,
                                        fa::ConstTensorView lse, fa::ConstTensorView d_o,
                                        const fa::AttentionGradients& g, fa::DeviceContext& ctx) {
    fa::step10::attention_backward_rung(fa::step10::Rung::deterministic, pp, in, o, lse, d_o, g, ctx);
  };
  int cases = 0;
  for (const std::int64_t d : {64, 128})
    for (const bool causal : {false, true}) {
      // Several key tiles per query tile (Nk = 700: 6 key tiles), grouped heads, a query tail.
      fa::Problem p = problem16(333, 700, d, causal, 2, 4);
      p.heads_kv = 2;
      const fa::AttentionData data = inputs(p, 900 + cases);
      const fa::GpuRun first = fa::run_once(p, data, fa::step10::attention_forward, ordered);
      check_verification(fa::verify_backward(p, data, first.out, true, 0, 1), "deterministic " + p.describe());
      // Its extra memory: the accumulator, two floats per padded query row, one int per query tile.
      const std::int64_t br = d == 64 ? 128 : 80;  // the stage's query tiles
      const std::int64_t tiles = p.heads_total() * ((p.seq_q + br - 1) / br);
      const std::int64_t padded = (p.seq_q + kPad - 1) / kPad * kPad;
      CHECK(first.extra_bytes == p.q_elements() * 4 + 2 * p.heads_total() * padded * 4 + tiles * 4);
      for (int again = 0; again < 3; ++again) {
        const fa::GpuRun next = fa::run_once(p, data, fa::step10::attention_forward, ordered);
        std::int64_t differ = 0;
        for (std::int64_t n = 0; n < first.out.dq.numel(); ++n)
          differ += first.out.dq.get(n) != next.out.dq.get(n) ? 1 : 0;
        CHECK_MESSAGE(differ == 0, p.describe() << ": " << differ << " dQ elements differ from the first run");
      }
      ++cases;
    }
  CHECK(cases == 4);
  // Causal, many key tiles (12) and query tiles (19 of 80): the turns run from each query tile's
  // last key tile down, the blocks from the last key tile; twice the same dQ, bit for bit, and
  // correct.
  const fa::Problem p = problem16(1500, 1500, 128, true, 1, 2);
  const fa::AttentionData data = inputs(p, 950);
  const fa::GpuRun first = fa::run_once(p, data, fa::step10::attention_forward, ordered);
  check_verification(fa::verify_backward(p, data, first.out, false, 24, 3), "deterministic " + p.describe());
  const fa::GpuRun next = fa::run_once(p, data, fa::step10::attention_forward, ordered);
  std::int64_t differ = 0;
  for (std::int64_t n = 0; n < first.out.dq.numel(); ++n) differ += first.out.dq.get(n) != next.out.dq.get(n) ? 1 : 0;
  CHECK_MESSAGE(differ == 0, p.describe() << ": " << differ << " dQ elements differ between two runs");
}

TEST_CASE("stage 10 with large logits (scores 50..200) and ramp inputs") {
  fa::step09::exit_skipped_unless_hopper();
  for (const bool causal : {false, true})
    for (const std::int64_t d : {64, 128}) {
      const fa::Problem p = problem16(150, 190, d, causal, 1, 3);
      const fa::AttentionData big = inputs(p, 7, fa::InputKind::large_logits);
      check_verification(fa::verify_backward(p, big, run(p, big).out, true, 0, 1), p.describe() + " large logits");
      const fa::AttentionData ramp = inputs(p, 8, fa::InputKind::ramp);
      check_verification(fa::verify_backward(p, ramp, run(p, ramp).out, true, 0, 1), p.describe() + " ramp");
    }
}

TEST_CASE("stage 10 against stage 08 on the same inputs, both against float64") {
  fa::step09::exit_skipped_unless_hopper();
  for (const bool causal : {false, true})
    for (const std::int64_t d : {64, 128}) {
      const fa::Problem p = problem16(300, 333, d, causal, 2, 2);
      const fa::AttentionData data = inputs(p, 21);
      const fa::GpuRun ours = run(p, data), theirs = run_stage08(p, data);
      check_verification(fa::verify_backward(p, data, theirs.out, true, 0, 1), p.describe() + " stage 08");
      // Two results within the 16-bit rule of float64 are within twice it of each other; 5 % of
      // the largest gradient is far above that rule and far below any wrong tile's error.
      const fa::Verification pair = fa::compare_backward(ours.out, theirs.out, 0.05);
      for (const Report r : {kDq, kDk, kDv}) {
        INFO(p.describe() << ": stage 10 against stage 08: " << pair.reports[r].summary());
        CHECK(pair.reports[r].ok());
      }
    }
}

TEST_CASE("rows that see no key (causal, Nq > Nk) get dQ = 0 and add nothing to dK, dV") {
  fa::step09::exit_skipped_unless_hopper();
  fa::testing::check_keyless_rows_backward(
      [](const fa::Problem& p, const fa::AttentionData& data) { return run(p, data).out; });
}

TEST_CASE("sampled-row verification at the executable's size, causal") {
  fa::step09::exit_skipped_unless_hopper();
  const fa::Problem p = problem16(2000, 2000, 128, true, 2, 4);
  const fa::AttentionData data = inputs(p, 5);
  const fa::Verification v = fa::verify_backward(p, data, run(p, data).out, false, 24, 5);
  check_verification(v, p.describe() + " sampled");
  CHECK(v.reports[kDq].count >= 2 * 24 * 128);
}

TEST_CASE("memory: the dQ accumulator and two floats per (padded) query row, measured; nothing N×N") {
  fa::step09::exit_skipped_unless_hopper();
  for (const std::int64_t n : {500, 1000, 2000}) {
    const fa::Problem p = problem16(n, n, 64, true, 1, 4);
    const fa::AttentionData data = inputs(p, 2);
    const std::int64_t padded = (n + kPad - 1) / kPad * kPad, rows = 2 * p.heads_total() * padded * 4;
    const fa::GpuRun r = run(p, data);
    MESSAGE("N=" << n << ": extra memory " << r.extra_bytes << " B (dQ accumulator + D + LSE·log2e: "
                 << p.q_elements() * 4 + rows << " B)");
    CHECK(r.extra_bytes == p.q_elements() * 4 + rows);
  }
}

TEST_CASE("stage 10 refuses what it does not run, with one line") {
  fa::step09::exit_skipped_unless_hopper();
  const fa::DeviceForward none = [](const fa::Problem&, const fa::AttentionInputs&, const fa::AttentionOutputs&,
                                    fa::DeviceContext&) {};
  for (const std::int64_t d : {32, 96}) {
    const fa::Problem p = problem16(8, 8, d, false, 1, 1);
    CHECK_THROWS_AS(fa::run_once(p, inputs(p, 1), none, fa::step10::attention_backward), fa::UsageError);
  }
  // At D = 256 only the stage's kernel: every other rung and the deterministic variant refuse.
  const fa::Problem p256 = problem16(8, 8, 256, false, 1, 1);
  using fa::step10::Rung;
  for (const Rung rung : {Rung::wgmma, Rung::rows_in_shared, Rung::dq_by_tma, Rung::own_dq, Rung::ds_by_stmatrix,
                          Rung::three_groups, Rung::group_barrier, Rung::wide_query_tiles, Rung::fast_exp,
                          Rung::dq_before_dk, Rung::dv_early, Rung::tiles_of_80, Rung::heavy_first,
                          Rung::split_tail, Rung::deterministic})
    if (rung != fa::step10::kStageRung)
      CHECK_THROWS_AS(fa::run_once(p256, inputs(p256, 1), none, rung_backward(rung)), fa::UsageError);
  fa::Problem grouped = problem16(8, 8, 64, false, 1, 2);
  grouped.heads_kv = 1;
  for (const fa::step10::Rung rung : {fa::step10::Rung::wgmma, fa::step10::Rung::rows_in_shared}) {
    const fa::DeviceBackward lower = [rung](const fa::Problem& pp, const fa::AttentionInputs& in, fa::ConstTensorView o,
                                            fa::ConstTensorView lse, fa::ConstTensorView d_o,
                                            const fa::AttentionGradients& g, fa::DeviceContext& ctx) {
      fa::step10::attention_backward_rung(rung, pp, in, o, lse, d_o, g, ctx);
    };
    CHECK_THROWS_AS(fa::run_once(grouped, inputs(grouped, 1), none, lower), fa::UsageError);
  }
  fa::Problem uneven = problem16(8, 8, 64, false, 1, 3);
  uneven.heads_kv = 2;
  CHECK_THROWS_AS(fa::run_once(uneven, inputs(uneven, 1), none, fa::step10::attention_backward), fa::UsageError);
  const fa::Problem p32 = problem(8, 8, 64, false, 1, 1);
  CHECK_THROWS_AS(fa::run_once(p32, inputs(p32, 1), none, fa::step10::attention_backward), fa::UsageError);
}

TEST_CASE("a dK that is never written fails the verification (the check can fail)") {
  fa::step09::exit_skipped_unless_hopper();
  const fa::Problem p = problem16(70, 70, 64, true, 1, 2);
  const fa::AttentionData data = inputs(p, 9);
  const fa::DeviceBackward skips_dk = [](const fa::Problem& pp, const fa::AttentionInputs& in, fa::ConstTensorView o,
                                         fa::ConstTensorView lse, fa::ConstTensorView d_o,
                                         const fa::AttentionGradients& g, fa::DeviceContext& ctx) {
    fa::step10::attention_backward(pp, in, o, lse, d_o, g, ctx);
    FA_CUDA_CHECK(cudaMemset(g.dk.data, 0xFF, g.dk.bytes()));  // NaN again, as if skipped
  };
  const fa::Verification v =
      fa::verify_backward(p, data, fa::run_once(p, data, fa::step10::attention_forward, skips_dk).out, true, 0, 1);
  CHECK_FALSE(v.reports[kDk].ok());
  CHECK(v.reports[kDq].ok());
}
