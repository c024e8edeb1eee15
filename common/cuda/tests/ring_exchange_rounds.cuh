// ring_exchange_rounds.cuh — the check that test_ring_exchange and test_ring_exchange_nccl share:
// P ranks each start with a buffer of their own words; after hop k rank r must hold exactly what
// rank r − k started with, and after P hops its own again (what a ring attention's K/V blocks do).
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "fa/cuda/check.cuh"
#include "fa/cuda/device_buffer.cuh"
#include "fa/cuda/peer/ring_exchange.cuh"

namespace fa::peer::testing {

inline std::uint32_t word(int rank, std::size_t i) { return static_cast<std::uint32_t>(rank) * 1000003u + static_cast<std::uint32_t>(i); }

// Runs P = devices.size() hops of `exchange`, each rank passing on what it received last, and
// checks every rank's buffer after every hop.
inline void check_rounds(Exchange& exchange, const std::vector<int>& devices, std::size_t words) {
  const int P = static_cast<int>(devices.size());
  MemoryMeter meter;
  std::vector<DeviceBuffer<std::uint32_t>> held, arriving;
  std::vector<cudaStream_t> streams(P);
  for (int r = 0; r < P; ++r) {
    DeviceScope on(devices[r]);
    std::vector<std::uint32_t> mine(words);
    for (std::size_t i = 0; i < words; ++i) mine[i] = word(r, i);
    held.emplace_back(meter, words);
    arriving.emplace_back(meter, words);
    held.back().upload(mine.data(), words);
    arriving.back().poison();  // a word the hop does not write fails
    FA_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
  }
  const std::vector<std::size_t> bytes(P, words * sizeof(std::uint32_t));
  for (int hop = 1; hop <= P; ++hop) {
    std::vector<const void*> send(P);
    std::vector<void*> recv(P);
    for (int r = 0; r < P; ++r) {
      send[r] = held[r].data();
      recv[r] = arriving[r].data();
    }
    exchange.hop(send, bytes, recv, bytes, streams);
    for (int r = 0; r < P; ++r) {
      DeviceScope on(devices[r]);
      FA_CUDA_CHECK(cudaStreamSynchronize(streams[r]));
      std::swap(held[r], arriving[r]);
      std::vector<std::uint32_t> got(words);
      held[r].download(got.data(), words);
      const int from = ((r - hop) % P + P) % P;
      std::size_t bad = 0;
      for (std::size_t i = 0; i < words; ++i) bad += got[i] != word(from, i);
      INFO("hop " << hop << ", rank " << r << " on device " << devices[r] << ", expected rank " << from << "'s words");
      CHECK(bad == 0);
    }
  }
  for (int r = 0; r < P; ++r) {
    DeviceScope on(devices[r]);
    FA_CUDA_CHECK(cudaStreamDestroy(streams[r]));
  }
}

}  // namespace fa::peer::testing
