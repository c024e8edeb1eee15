// Tests of the ring's hop by copies (fa/cuda/peer/ring_exchange.cuh): rings of 1 to 4 ranks on the
// visible GPUs (ranks share a GPU where there are fewer), sizes that are not multiples of anything,
// a refused mismatch, and the device each call leaves current. Skipped (exit 77) without a device.
#include <doctest/doctest.h>

#include <stdexcept>
#include <vector>

#include "fa/cuda/check.cuh"
#include "fa/cuda/peer/ring_exchange.cuh"
#include "ring_exchange_rounds.cuh"

namespace {

std::vector<int> ranks_on_visible_devices(int P) {
  int count = 0;
  FA_CUDA_CHECK(cudaGetDeviceCount(&count));
  std::vector<int> devices(P);
  for (int r = 0; r < P; ++r) devices[r] = r % count;
  return devices;
}

}  // namespace

TEST_CASE("copies: after hop k, rank r holds what rank r - k started with; after P hops, its own") {
  for (const int P : {1, 2, 3, 4})
    for (const std::size_t words : {std::size_t{1}, std::size_t{1000}, std::size_t{(1u << 20) + 7}}) {
      INFO(P << " ranks, " << words << " words");
      const std::vector<int> devices = ranks_on_visible_devices(P);
      auto exchange = fa::peer::make_copy_exchange(devices);
      fa::peer::testing::check_rounds(*exchange, devices, words);
    }
}

TEST_CASE("copies: a send and a receive of different sizes are refused before anything is queued") {
  const std::vector<int> devices = ranks_on_visible_devices(2);
  auto exchange = fa::peer::make_copy_exchange(devices);
  std::vector<cudaStream_t> streams = {nullptr, nullptr};
  int dummy[4] = {};
  CHECK_THROWS_AS(exchange->hop({dummy, dummy}, {16, 16}, {dummy + 1, dummy + 1}, {16, 8}, streams), std::logic_error);
}

TEST_CASE("a DeviceScope gives the caller's device back") {
  int count = 0, before = -1, inside = -1, after = -1;
  FA_CUDA_CHECK(cudaGetDeviceCount(&count));
  FA_CUDA_CHECK(cudaGetDevice(&before));
  {
    fa::peer::DeviceScope on(count - 1);
    FA_CUDA_CHECK(cudaGetDevice(&inside));
  }
  FA_CUDA_CHECK(cudaGetDevice(&after));
  CHECK(inside == count - 1);
  CHECK(after == before);
}

TEST_CASE("without NCCL in the build, asking for it is a logic error, not a crash") {
  if (fa::peer::built_with_nccl()) return;  // test_ring_exchange_nccl runs the real thing
  CHECK_THROWS_AS(fa::peer::make_nccl_exchange({0}), std::logic_error);
}
