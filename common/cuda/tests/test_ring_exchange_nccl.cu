// The ring's hop through NCCL (fa/cuda/peer/ring_exchange.cuh) on 2 to all visible GPUs, one rank
// per GPU: the same rounds as the copies' test. Skipped (exit 77) with fewer than two GPUs or
// without NCCL in the build.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "fa/cuda/peer/ring_exchange.cuh"
#include "ring_exchange_rounds.cuh"

TEST_CASE("NCCL: after hop k, rank r holds what rank r - k started with; after P hops, its own") {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  if (count < 2 || !fa::peer::built_with_nccl()) {
    std::printf("skipped: %s\n", count < 2 ? "needs two GPUs" : "built without NCCL");
    std::exit(77);
  }
  for (int P = 2; P <= count; ++P)
    for (const std::size_t words : {std::size_t{1}, std::size_t{(1u << 20) + 7}}) {
      INFO(P << " GPUs, " << words << " words");
      std::vector<int> devices(P);
      for (int r = 0; r < P; ++r) devices[r] = r;
      auto exchange = fa::peer::make_nccl_exchange(devices);
      fa::peer::testing::check_rounds(*exchange, devices, words);
    }
}
