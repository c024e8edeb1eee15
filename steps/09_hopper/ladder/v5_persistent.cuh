// v5_persistent.cuh — rung 5 of stage 09's ladder, the last: persistent, with a dynamic tile
// scheduler: one block per SM, each taking query tiles from a counter in global memory until none
// are left, the next tile's copies under the current one's last products and epilogue.
//
// What changed from v4_overlap.cuh (the consumers' work on one tile, consume_tile_overlap, is the
// same function):
//   - the launch: min(work items, SMs) blocks, not one block per (query tile, head). In the grid
//     launch a block's start (Q and the first K/V in flight, nothing to compute yet) and its end
//     (the last P·V, O written, nothing loading) are exposed; here the producer loads the next
//     tile's Q once every consumer is done with the last S (q_empty) and its K/V as stages empty.
//   - the schedule: without the mask, work item w is (head w / tiles, query tile w mod tiles), the
//     grid launch's order; causal, the heaviest tiles of a group of heads first, the tiles ending
//     at the last row (`item` below; measured in chapter 09). A block's first item is blockIdx.x, each
//     next one gridDim.x + atomicAdd(counter, 1): whichever block is free takes the next item, as
//     the hardware hands out blocks in the grid launch. A fixed round-robin (item blockIdx.x +
//     k·gridDim.x) was tried first and lost causal (0.64-0.96×, chapter 09): it gives each block
//     a fixed mix of heavy and light tiles.
//   - the item reaches the consumers through shared memory: a ring of two slots, each with an
//     item_full mbarrier (the producer's one arrival: release) and an item_empty one (every
//     consumer thread's arrival, after reading it). The producer reads the counter; w ≥ items,
//     published like any item, ends every role.
//   - the stages and the mbarriers' phases run on from tile to tile: `it`, the block's K/V tiles so
//     far, and `q_round`, its query tiles so far, are counted alike by the producer and consumers.
//
// Predicted before its first run: none written; the static round-robin version was measured level
// without the mask first (chapter 09). Measured (one run beside overlap, chapter 09): 1.01-1.03× at
// D = 64 and N ≥ 4k, 1.05-1.08× at 1k, where blocks are short; level at D = 128. The causal schedule of `item`, later: 1.08× at
// D = 64 and 4k, 1.04× at D = 128 and 4k, against the head-after-head order from row 0.
//
//   producer (1 thread):  w = blockIdx.x; loop: publish w; [w ≥ items: end]; wait q_empty;
//                         Q ─► q_full; K/V tiles as stages empty; w = gridDim.x + atomicAdd(counter, 1)
//   consumer warpgroups:  loop: take w; [w ≥ items: end]; consume_tile_overlap (arrives on q_empty after its
//                         last S, on kv_empty after each P·V; writes O)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fa/cuda/tc/tile_ops.cuh"
#include "09_hopper/ladder/v4_overlap.cuh"  // consume_tile_overlap, and through it WsShared, produce_*
#include "fa/cuda/hopper/tma.cuh"
#include "fa/cuda/hopper/warp_roles.cuh"

namespace fa::step09 {
using namespace hopper;  // TMA, wgmma and warp-role wrappers (common/cuda/include/fa/cuda/hopper/)

// The shared memory beyond WsShared's: Q's empty barrier and the ring of work items.
struct TileQueue {
  static constexpr int kBytes = 8 * 5 + 2 * 4;  // q_empty, item_full[2], item_empty[2]; item[2]
  std::uint64_t* q_empty;     // every consumer is done with Q's last S
  std::uint64_t* item_full;   // [2] slot r mod 2 holds item r
  std::uint64_t* item_empty;  // [2] every consumer thread has read it
  int* item;                  // [2]

  __device__ explicit TileQueue(unsigned char* base) {
    q_empty = reinterpret_cast<std::uint64_t*>(base);
    item_full = q_empty + 1;
    item_empty = item_full + 2;
    item = reinterpret_cast<int*>(item_empty + 2);
  }
  __device__ void init_barriers(int consumer_threads) const {
    barrier_init(q_empty, consumer_threads / 128);  // one arrival per consumer warpgroup
    for (int r = 0; r < 2; ++r) {
      barrier_init(&item_full[r], 1);
      barrier_init(&item_empty[r], consumer_threads);
    }
  }
  // The producer: wait until slot r mod 2 was read (round r − 2), write item r, arrive.
  __device__ void publish(int r, int w) const {
    barrier_wait(&item_empty[r & 1], static_cast<std::uint32_t>(((r >> 1) & 1) ^ 1));
    item[r & 1] = w;
    barrier_arrive(&item_full[r & 1]);  // release: the store above is seen by whoever waits
  }
  // A consumer thread: wait for item r, read it, let the slot go.
  __device__ int take(int r) const {
    barrier_wait(&item_full[r & 1], static_cast<std::uint32_t>((r >> 1) & 1));
    const int w = item[r & 1];
    barrier_arrive(&item_empty[r & 1]);
    return w;
  }
};

// The work items of a launch and the counter that hands them out (zeroed before every launch).
struct TileSchedule {
  int tiles, items;  // query tiles per head; tiles × heads
  int head_group;    // causal: heads whose tiles are handed out together, heaviest first
  int* counter;
};

template <class T, class C>
__global__ void __launch_bounds__(C::kThreads, 1)
    flash_persistent_kernel(const __grid_constant__ TileMaps maps, const KernelArgs<T> a, const TileSchedule ts) {
  extern __shared__ unsigned char smem_raw[];
  const WsShared<T, C> sh(smem_raw);
  const TileQueue queue(reinterpret_cast<unsigned char*>(sh.kv_empty + C::kStages));
  // Work item w → (head, first row of its query tile).
  //   - Causal, the query tiles end at the last row rather than start at row 0: when Br does not
  //     divide Nq, the part-empty tile is then the one with the fewest keys, not the one with the
  //     most (at D = 64, Br = 192 and Nq = 4096, the last tile's 64 rows would run all 32 key
  //     tiles for three times as many rows). Its rows above row 0 are out of bounds: zeros from
  //     the tensor map, every key masked, never written.
  //   - Causal, the heads go in groups of ts.head_group, and within a group the heaviest tiles of
  //     all its heads come first: the last items handed out are the lightest, so no block is left
  //     with a heavy tile while the others have finished. A group, not all heads at once, so that
  //     the K/V of the heads in progress stay in L2 (the host sizes the group: about 16 MiB).
  //   - Otherwise head after head, its tiles in order.
  const int shift = a.causal ? ts.tiles * C::kBr - a.seq_q : 0, heads = ts.items / ts.tiles;
  const auto item = [&](int w, int& head) {
    if (!a.heavy_first) {
      head = w / ts.tiles;
      return w % ts.tiles * C::kBr - shift;
    }
    const int group = w / (ts.head_group * ts.tiles), in_group = w % (ts.head_group * ts.tiles);
    const int heads_here = min(ts.head_group, heads - group * ts.head_group);
    head = group * ts.head_group + in_group % heads_here;
    return (ts.tiles - 1 - in_group / heads_here) * C::kBr - shift;
  };

  if (threadIdx.x == 0) {
    sh.init_barriers();
    queue.init_barriers(128 * C::kConsumers);
  }
  __syncthreads();

  int it = 0, q_round = 0;  // K/V tiles and query tiles so far; the producer and consumers count alike
  if (threadIdx.x / 128 == 0) {  // the producer
    release_registers<C::kProducerRegisters>();
    if (threadIdx.x != 0) return;
    int w = static_cast<int>(blockIdx.x);
    for (int r = 0;; ++r) {
      queue.publish(r, w);
      if (w >= ts.items) return;
      int head;
      const int i0 = item(w, head);
      const tc::KeyTiles kv = tc::key_tiles(i0, C::kBr, C::kBc, a.seq_q, a.seq_k, a.causal);
      if (kv.count > 0) {
        // Q's buffer empty: the consumers are past the last tile's S (the first tile passes at once).
        barrier_wait(queue.q_empty, static_cast<std::uint32_t>((q_round & 1) ^ 1));
        produce_q(sh, maps, i0, head);
        produce_kv(sh, maps, head, kv.count, it);
        it += kv.count, ++q_round;
      }
      w = static_cast<int>(gridDim.x) + atomicAdd(ts.counter, 1);
    }
  }

  take_registers<C::kConsumerRegisters>();
  for (int r = 0;; ++r) {
    const int w = queue.take(r);
    if (w >= ts.items) return;
    int head;
    const int i0 = item(w, head);
    const tc::KeyTiles kv = tc::key_tiles(i0, C::kBr, C::kBc, a.seq_q, a.seq_k, a.causal);
    consume_tile_overlap<T, C, true>(sh, a, i0, static_cast<std::int64_t>(head) * a.seq_q, kv, it, q_round,
                                       queue.q_empty);
    if (kv.count > 0) it += kv.count, ++q_round;
  }
}

}  // namespace fa::step09
