// Stage 13 on two GPUs through NCCL: forward and backward against float64, causal (zigzag and
// contiguous) and not, and bitwise the same O, LSE, dK, dV as the copy transport on the same devices
// (the hops move the same bytes; only how differs). Skipped (exit 77) with fewer than two GPUs or without
// NCCL in the build.
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "13_ring_attention/ring_gpu.cuh"
#include "fa/backward.hpp"
#include "fa/cuda/peer/ring_exchange.cuh"
#include "fa/random.hpp"
#include "fa/testing.hpp"

namespace {

void skip_unless_two_gpus() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  if (count < 2 || !fa::peer::built_with_nccl()) {
    std::printf("skipped: %s\n", count < 2 ? "needs two GPUs" : "built without NCCL");
    std::exit(77);
  }
}

}  // namespace

TEST_CASE("two GPUs, NCCL: forward and backward against float64, and equal to the copy transport") {
  skip_unless_two_gpus();
  std::uint64_t seed = 2200;
  for (const bool causal : {true, false})
    for (const fa::step13::Split split : {fa::step13::Split::zigzag, fa::step13::Split::contiguous}) {
      fa::Problem p = fa::testing::problem(1537, 1537, 128, causal, 1, 3);
      p.dtype = fa::DType::bfloat16;
      INFO((causal ? "causal " : "") << fa::step13::to_string(split));
      fa::AttentionData in = fa::make_inputs(p, ++seed);
      in.d_o = fa::make_output_grad(p, ++seed);
      fa::AttentionResult by_nccl(p, fa::Pass::backward), by_copy(p, fa::Pass::backward);
      for (auto [transport, out] : {std::pair{fa::step13::Transport::nccl, &by_nccl}, std::pair{fa::step13::Transport::copy, &by_copy}}) {
        fa::step13::RingAttention ring(p, {.gpus = 2, .split = split, .transport = transport}, fa::Pass::backward);
        ring.load(in);
        ring.forward();
        ring.backward();
        ring.store(*out);
      }
      fa::testing::check_verified(p, in, by_nccl, "ring over NCCL");
      const fa::Verification v = fa::verify_backward(p, in, by_nccl, /*full=*/true, 0, seed);
      for (const fa::CompareReport& r : v.reports) CHECK_MESSAGE(r.ok(), r.summary());
      // The same bytes moved, so the same result: bitwise, but dQ (stages 08 and 10 sum it in float32
      // in an order that may change from run to run), which is checked against float64 above.
      for (auto [a, b] : {std::pair{&by_nccl.o, &by_copy.o}, std::pair{&by_nccl.lse, &by_copy.lse},
                          std::pair{&by_nccl.dk, &by_copy.dk}, std::pair{&by_nccl.dv, &by_copy.dv}})
        CHECK(std::memcmp(a->raw(), b->raw(), a->bytes()) == 0);
    }
}
