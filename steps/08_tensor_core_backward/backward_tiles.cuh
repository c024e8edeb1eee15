// backward_tiles.cuh — what every key-tile kernel of stage 08 shares, the ladder's rungs
// (ladder/) and the stage's kernel (backward_tc_kernel.cuh) alike: the launch's arguments, the
// query tiles a key tile meets (and which of them need the mask), dQ's atomic addition (these three
// from fa/cuda/backward/key_tiles.cuh), and the packing of two accumulator tiles into an A fragment.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fa/cuda/backward/key_tiles.cuh"
#include "fa/cuda/ptx/mma.cuh"

namespace fa::step08 {

// The launch's arguments, the query tiles a key tile meets and dQ's atomic addition, taught here,
// live in common/ (fa/cuda/backward/key_tiles.cuh) because stage 10's kernels share them.
using bwd::add_to_dq;
using bwd::BackwardArgs;
using bwd::query_tiles;
using bwd::QueryTiles;

// Two 8-query column tiles of a warp's accumulators, x[mi][2ks] and x[mi][2ks + 1] (16 keys × 16
// queries), packed to 16 bits of type U as an A fragment: the C→A identity of stage 07.
template <class U, int KM, int NQ>
__device__ __forceinline__ void pack_a(const float (&x)[KM][NQ][4], int mi, int ks, std::uint32_t (&frag)[4]) {
  const float(&c0)[4] = x[mi][2 * ks], (&c1)[4] = x[mi][2 * ks + 1];
  frag[0] = ptx::pack2<U>(c0[0], c0[1]), frag[1] = ptx::pack2<U>(c0[2], c0[3]);
  frag[2] = ptx::pack2<U>(c1[0], c1[1]), frag[3] = ptx::pack2<U>(c1[2], c1[3]);
}

}  // namespace fa::step08
