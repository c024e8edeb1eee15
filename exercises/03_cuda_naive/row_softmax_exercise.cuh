// Exercise 03 — the function that row_softmax_exercise.cu defines: stage 03's softmax, in fa::ex03.
#pragma once

#include <cuda_runtime.h>

#include "fa/problem.hpp"

namespace fa::ex03 {

// P = softmax(S) row by row over the keys each row sees, and LSE, for the [B·H·Nq, Nk] device
// matrices s and pr and the [B·H·Nq] device vector lse. Waits for the kernel; throws
// fa::TodoNotDone naming the first hole of the kernel that is still a TODO.
void launch_row_softmax(const Problem& p, const float* s, float* pr, float* lse, cudaStream_t stream = nullptr);

}  // namespace fa::ex03
