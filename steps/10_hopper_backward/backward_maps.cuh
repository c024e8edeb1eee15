// backward_maps.cuh — the four tensor maps every rung of stage 10 is launched with: Q and dO over
// [B·H][Nq][D] in boxes of Br rows, K and V over [B·H][Nk][D] in boxes of Bc rows (64 columns per
// box: fa/cuda/hopper/tma.cuh), built on the host (hopper_backward.cu) at every launch.
#pragma once

#include <cuda.h>

namespace fa::step10 {

struct BackwardMaps {
  CUtensorMap q, d_o, k, v;
};

}  // namespace fa::step10
