// backward_maps.cuh — the tensor maps the rungs of stage 10 are launched with: Q and dO over
// [B·H][Nq][D] in boxes of Br rows, K and V over [B·H][Nk][D] in boxes of Bc rows (64 columns per
// box: fa/cuda/hopper/tma.cuh), built on the host (hopper_backward.cu) at every launch.
#pragma once

#include <cuda.h>

namespace fa::step10 {

struct BackwardMaps {
  CUtensorMap q, d_o, k, v;
};

// Rung 3 on: also the float32 dQ accumulator [B·H][Nq][D] in boxes of Br rows × 32 floats, which
// the TMA adds each query tile's dQ into.
struct BackwardMapsWithDq : BackwardMaps {
  CUtensorMap dq;
};

}  // namespace fa::step10
