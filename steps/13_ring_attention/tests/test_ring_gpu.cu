// Stage 13's ring on the GPU, with the copy transport: rings of 1 to 4 ranks on the GPUs there are
// (all on one GPU when there is one), so that one GPU checks the schedule, the hops, the events and
// the merges as P GPUs would run them. Forward and backward against float64 with the 16-bit rule
// (docs/tolerance.md), both splits, causal or not, sequences that are no multiple of the chunks or
// shorter than them (empty chunks), D = 64, 128 and 256, fp16 and bf16, large logits; the hops
// overlapped or serialized, and a second run on the same ring (the own block kept at home), give
// bitwise the same O, LSE, dK and dV (dQ to a few units in the last place: stage 08 sums it with
// atomics, stage 10 with the TMA's reduce-add, both in no fixed order); each rank holds 1/P of the
// tokens (measured on its meter).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "13_ring_attention/ring_gpu.cuh"
#include "fa/backward.hpp"
#include "fa/random.hpp"
#include "fa/testing.hpp"

namespace {

using fa::step13::RingOptions;
using fa::step13::Split;
using fa::step13::Transport;

constexpr Split kSplits[] = {Split::zigzag, Split::contiguous};

fa::Problem ring_problem(std::int64_t n, std::int64_t d, bool causal, fa::DType t, std::int64_t heads = 2) {
  fa::Problem p = fa::testing::problem(n, n, d, causal, 1, heads);
  p.dtype = t;
  return p;
}

RingOptions copy_ring(int gpus, Split split, bool overlap = true) {
  return RingOptions{.gpus = gpus, .split = split, .transport = Transport::copy, .overlap = overlap};
}

fa::AttentionResult run_ring(const fa::Problem& p, const fa::AttentionData& in, const RingOptions& o, fa::Pass pass,
                             int runs = 1) {
  fa::AttentionResult out(p, pass);
  fa::step13::RingAttention ring(p, o, pass);
  ring.load(in);
  for (int i = 0; i < runs; ++i) {
    ring.forward();
    if (pass == fa::Pass::backward) ring.backward();
  }
  ring.store(out);
  return out;
}

bool same_bytes(const fa::HostTensor& a, const fa::HostTensor& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

}  // namespace

TEST_CASE("forward: rings of 1-4 ranks against float64, both splits, causal or not, awkward lengths") {
  std::uint64_t seed = 1100;
  for (const fa::DType t : {fa::DType::bfloat16, fa::DType::float16})
    for (const std::int64_t d : {64, 128})
      for (const bool causal : {true, false})
        for (const std::int64_t n : {1, 7, 300, 1000})
          for (int gpus = 1; gpus <= 4; ++gpus)
            for (const Split split : kSplits) {
              const fa::Problem p = ring_problem(n, d, causal, t);
              INFO(fa::to_string(t) << " D=" << d << (causal ? " causal" : "") << " N=" << n << " P=" << gpus << " "
                                    << fa::step13::to_string(split));
              const fa::AttentionData in = fa::make_inputs(p, ++seed);
              const fa::AttentionResult got = run_ring(p, in, copy_ring(gpus, split), fa::Pass::forward);
              fa::testing::check_verified(p, in, got, "ring");
            }
}

TEST_CASE("forward: D = 256, large logits, and more heads") {
  for (const Split split : kSplits) {
    const fa::Problem p = ring_problem(333, 256, true, fa::DType::bfloat16);
    const fa::AttentionData in = fa::make_inputs(p, 1101);
    fa::testing::check_verified(p, in, run_ring(p, in, copy_ring(3, split), fa::Pass::forward), "ring D=256");
  }
  const fa::Problem big = ring_problem(700, 128, true, fa::DType::float16, 5);
  const fa::AttentionData large = fa::make_inputs(big, 1102, fa::InputKind::large_logits);
  fa::testing::check_verified(big, large, run_ring(big, large, copy_ring(4, Split::zigzag), fa::Pass::forward),
                              "ring, large logits");
}

TEST_CASE("backward: rings of 1-3 ranks against float64, both splits, causal or not") {
  std::uint64_t seed = 1200;
  for (const std::int64_t d : {64, 128})
    for (const bool causal : {true, false})
      for (const std::int64_t n : {5, 257, 800})
        for (int gpus = 1; gpus <= 3; ++gpus)
          for (const Split split : kSplits) {
            const fa::Problem p = ring_problem(n, d, causal, fa::DType::bfloat16);
            INFO("D=" << d << (causal ? " causal" : "") << " N=" << n << " P=" << gpus << " " << fa::step13::to_string(split));
            fa::AttentionData in = fa::make_inputs(p, ++seed);
            in.d_o = fa::make_output_grad(p, ++seed);
            const fa::AttentionResult got = run_ring(p, in, copy_ring(gpus, split), fa::Pass::backward);
            const fa::Verification v = fa::verify_backward(p, in, got, /*full=*/true, 0, seed);
            for (const fa::CompareReport& r : v.reports) CHECK_MESSAGE(r.ok(), r.summary());
          }
}

// dQ sums its key tiles in float32 (stage 08's atomics, stage 10's TMA reduce-add), in an order
// that may change from run to run: two correct runs agree to a few units in the last place of 16
// bits, not bitwise.
void check_close_16bit(const fa::HostTensor& a, const fa::HostTensor& b, const char* what) {
  REQUIRE(a.numel() == b.numel());
  int bad = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const float x = a.get(i), y = b.get(i);
    if (!(std::abs(x - y) <= 4.0f * 0.0078125f * std::max(std::abs(x), std::abs(y)) + 1e-6f)) ++bad;
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " elements differ by more than 4 bf16 units in the last place");
}

TEST_CASE("the hops overlapped or not, and a second run on the same ring, give the same result") {
  for (const bool causal : {true, false}) {
    const fa::Problem p = ring_problem(900, 64, causal, fa::DType::bfloat16);
    fa::AttentionData in = fa::make_inputs(p, 1300);
    in.d_o = fa::make_output_grad(p, 1301);
    const fa::AttentionResult overlapped = run_ring(p, in, copy_ring(3, Split::zigzag, true), fa::Pass::backward);
    const fa::AttentionResult serial = run_ring(p, in, copy_ring(3, Split::zigzag, false), fa::Pass::backward);
    const fa::AttentionResult twice = run_ring(p, in, copy_ring(3, Split::zigzag, true), fa::Pass::backward, 2);
    for (const fa::AttentionResult* other : {&serial, &twice}) {  // bitwise, but dQ (its atomics)
      CHECK(same_bytes(overlapped.o, other->o));
      CHECK(same_bytes(overlapped.lse, other->lse));
      check_close_16bit(overlapped.dq, other->dq, "dQ");
      CHECK(same_bytes(overlapped.dk, other->dk));
      CHECK(same_bytes(overlapped.dv, other->dv));
    }
  }
}

TEST_CASE("each rank holds 1/P of the tokens (its meter), and the ring's extra memory is O(N/P)") {
  const fa::Problem p = ring_problem(8192, 128, true, fa::DType::bfloat16, 4);
  const fa::AttentionData in = fa::make_inputs(p, 1400);
  const double q_bytes = static_cast<double>(p.q_elements()) * 2;  // Q, K, V, O each
  for (const int gpus : {1, 2, 4}) {
    fa::step13::RingAttention ring(p, copy_ring(gpus, Split::zigzag), fa::Pass::forward);
    ring.load(in);
    ring.forward();  // whatever the kernels take from the rank's context counts too
    fa::AttentionResult out(p);
    ring.store(out);
    for (const auto& rank : ring.memory()) {
      INFO("P = " << gpus);
      // Q, O, K, V of N/P tokens and their LSE: 4/P of one tensor, plus N/P floats per head.
      const double io = 4.0 * q_bytes / gpus + 4.0 * p.heads * p.seq_q / gpus;
      CHECK(static_cast<double>(rank.io_bytes) == doctest::Approx(io).epsilon(1e-9));
      // Beyond: two K/V blocks in flight (P > 1: 4 tensors of N/P tokens), O in float32 (2), one
      // block's O (1/2: a chunk is N/(2P) tokens) and LSE.
      const double extra = ((gpus > 1 ? 4.0 : 0.0) + 2.0 + 0.5) * q_bytes / gpus + 4.0 * p.heads * p.seq_q / gpus;
      CHECK(static_cast<double>(rank.peak_bytes - rank.io_bytes) <= extra * 1.01);
    }
  }
}

TEST_CASE("refusals: one line") {
  const fa::Problem cross = fa::testing::problem(64, 128, 64, false, 1, 2);
  fa::Problem p = cross;
  p.dtype = fa::DType::bfloat16;
  CHECK_THROWS_AS(fa::step13::RingAttention(p, copy_ring(2, Split::zigzag), fa::Pass::forward), fa::UsageError);
  fa::Problem f32 = ring_problem(64, 64, false, fa::DType::float32);
  CHECK_THROWS_AS(fa::step13::RingAttention(f32, copy_ring(2, Split::zigzag), fa::Pass::forward), fa::UsageError);
  fa::Problem d96 = ring_problem(64, 96, false, fa::DType::bfloat16);
  CHECK_THROWS_AS(fa::step13::RingAttention(d96, copy_ring(2, Split::zigzag), fa::Pass::forward), fa::UsageError);
  CHECK_THROWS_AS(fa::step13::parse_transport("mpi"), fa::UsageError);
}
