// Exercise 08 — the softmax's gradient on the tensor cores' accumulator registers, transposed:
// Pᵀ recomputed from the saved LSE, and dSᵀ = Pᵀ ∘ (dPᵀ − D), for the 16 keys of one warp's row
// block and one tile of queries.
//
// This is stage 08's probabilities_and_score_gradient (steps/08_tensor_core_backward/
// fragment_gradient.cuh), whole, with two holes between `// >>> ex08:TAG` and `// <<< ex08:TAG`:
// replace the device_todo(...) line with your code and leave the markers (the course check compares
// what is between them with the stage). Read the stage file's header first. The key-tile kernel
// computes Sᵀ = K Qᵀ, not S: keys are the rows of the accumulator and queries its columns. With
// g = lane / 4 and t = lane % 4, a thread holds st[n][0], st[n][1] = key g, queries 8n + 2t and
// 8n + 2t + 1 of the tile, and st[n][2], st[n][3] = the same queries of key g + 8 (dpt likewise).
//
//   ex08:query_numbers  l2 and dd: the LSE·log2e and the D of this thread's two queries of column
//                       tile n (lse2[8n + 2t], lse2[8n + 2t + 1], and delta likewise), as two
//                       float2 (the arrays are in shared memory, 8-byte aligned at every even index).
//   ex08:p_and_ds       for the element e: P = 2^(st·scale_log2 − LSE·log2e of ITS query)
//                       (fa::ptx::ex2), written over st[n][e]; dS = P·(dpt[n][e] − D of its query),
//                       written over dpt[n][e]. Which query is element e's? (e & 1: the odd column.)
//
// Device code cannot throw, so a hole calls device_todo(hole): it records the hole in a device
// flag, and the launcher, after the kernel, throws fa::TodoNotDone naming the first hole reached.
//
// Check your work (needs a GPU of compute capability 8.0 or newer; without one the checks report
// "skipped"):
//   cmake --build build --target check_ex08
// The chapter is docs/08_tensor_core_backward.md; the answer is in solutions/08_tensor_core_backward/.
// Outside the holes this file is the stage's function in namespace fa::ex08, the device_todo
// machinery, and a test kernel with its launcher: each warp loads 16 keys of Sᵀ and dPᵀ into the
// C-fragment layout and its queries' LSE·log2e and D into shared memory, as the stage does, calls
// your function, and writes Pᵀ and dSᵀ back. The checks (checks.cu) compare both with float64.
//
// What you should see when it passes (on a GPU): five `ok` lines, then `5 of 5 checks pass.`
// Without a GPU the checks report skipped (exit 77): that is not a pass.
// Hints, one at a time:
//   1. In stage 07 a row's numbers (m, l) were per thread row, r = e / 2. Here a query is a column:
//      its numbers depend on n and e & 1, and are the same for keys g and g + 8.
//   2. const float2 l2 = *reinterpret_cast<const float2*>(lse2 + 8 * n + 2 * t); and dd from delta.
//   3. const float p = ptx::ex2(fmaf(st[n][e], scale_log2, -((e & 1) ? l2.y : l2.x)));
//      st[n][e] = p; dpt[n][e] = p * (dpt[n][e] - ((e & 1) ? dd.y : dd.x));
// Common mistakes: indexing the LSE by the key (g, g + 8: the layout of stage 07, where rows were
// queries); lse2[n] or lse2[8n + t] (the thread's columns are 2t and 2t + 1); the natural exp with
// the log2 scale (P = exp(s·τ − LSE) is the same number, but the forward saved LSE·log2e for ex2);
// computing dS from the old dpt after it was overwritten, or from st after it became P (dS needs
// P and dP: P is the new st, dP the old dpt); a masked score giving NaN (−inf·τlog2e − finite is
// −inf, 2^−inf = 0: nothing to test); subtracting D from P instead of from dP.
#include "fragment_gradient_exercise.cuh"

#include <climits>
#include <cmath>
#include <cstddef>
#include <stdexcept>

#include "fa/cuda/check.cuh"
#include "fa/cuda/device_buffer.cuh"
#include "fa/cuda/ptx/mma.cuh"
#include "fa/exercise.hpp"

namespace fa::ex08 {

namespace {

// ---- FA_TODO for device code --------------------------------------------------------------------
enum Hole : int { kQueryNumbers = 0, kPAndDs = 1, kNoHole = INT_MAX };
const char* const kHoleMessages[] = {
    "TODO(ex08:query_numbers) is not done yet: l2 = the float2 at lse2 + 8n + 2t, dd = the float2 at "
    "delta + 8n + 2t (this thread's two queries of column tile n)",
    "TODO(ex08:p_and_ds) is not done yet: p = ex2(st[n][e] * scale_log2 - LSE2 of element e's query), "
    "st[n][e] = p, dpt[n][e] = p * (dpt[n][e] - D of that query); element e's query is 8n + 2t + (e & 1)",
};
__device__ int g_hole_reached;  // the lowest hole a thread reached; kNoHole: none
[[maybe_unused]] __device__ void device_todo(Hole hole) { atomicMin(&g_hole_reached, static_cast<int>(hole)); }

// ---- stage 08's function (steps/08_tensor_core_backward/fragment_gradient.cuh) ------------------

// In: st, dpt, one row block's raw scores Sᵀ (masked ones −inf) and dPᵀ; lse2 and delta, the query
// tile's LSE·log2e and D from the first of this warp's queries. Out: st = Pᵀ, dpt = dSᵀ.
template <int NQ>
__device__ __forceinline__ void probabilities_and_score_gradient(float (&st)[NQ][4], float (&dpt)[NQ][4],
                                                                 const float* lse2, const float* delta,
                                                                 float scale_log2) {
  const int t = static_cast<int>(threadIdx.x) % 4;
#pragma unroll
  for (int n = 0; n < NQ; ++n) {
    // >>> ex08:query_numbers
    device_todo(kQueryNumbers);  // l2, dd: the float2 of lse2 and of delta at this thread's queries
    // <<< ex08:query_numbers
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      // >>> ex08:p_and_ds
      device_todo(kPAndDs);  // st[n][e] = P of element e, dpt[n][e] = dS of element e
      // <<< ex08:p_and_ds
    }
  }
}

// ---- the test kernel: nothing to write below --------------------------------------------------

struct KernelArgs {
  const float* st;     // [blocks][16][queries]
  const float* dpt;    // [blocks][16][queries]
  const float* lse2;   // [blocks][queries]
  const float* delta;  // [blocks][queries]
  float* p;            // [blocks][16][queries]
  float* ds;           // [blocks][16][queries]
  float scale_log2;
};

// One warp per block: one row block of the key-tile kernel and one query tile. The scores go from
// memory into the C fragment (stage 08 has them from mma.sync), the queries' numbers into shared
// memory (stage 08 copies them there with the query tile).
template <int NQ>
__global__ void __launch_bounds__(32) score_gradient_kernel(const KernelArgs a) {
  constexpr int kQueries = 8 * NQ;
  __shared__ __align__(16) float lse2_s[kQueries];
  __shared__ __align__(16) float delta_s[kQueries];
  const int lane = static_cast<int>(threadIdx.x), g = lane / 4, t = lane % 4;
  const std::size_t block = blockIdx.x;
  for (int q = lane; q < kQueries; q += 32) {
    lse2_s[q] = a.lse2[block * kQueries + q];
    delta_s[q] = a.delta[block * kQueries + q];
  }
  __syncwarp();
  float st[NQ][4], dpt[NQ][4];  // [n][e]: key g + 8·(e / 2), query 8n + 2t + (e & 1)
  const auto at = [&](int n, int e) {
    return (block * 16 + g + 8 * (e / 2)) * kQueries + 8 * n + 2 * t + (e & 1);
  };
#pragma unroll
  for (int n = 0; n < NQ; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      st[n][e] = a.st[at(n, e)];
      dpt[n][e] = a.dpt[at(n, e)];
    }

  probabilities_and_score_gradient<NQ>(st, dpt, lse2_s, delta_s, a.scale_log2);

#pragma unroll
  for (int n = 0; n < NQ; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      a.p[at(n, e)] = st[n][e];
      a.ds[at(n, e)] = dpt[n][e];
    }
}

}  // namespace

GradientTileResult run_score_gradient(const GradientTile& in) {
  const std::size_t queries = static_cast<std::size_t>(in.queries());
  const std::size_t blocks = in.blocks > 0 ? static_cast<std::size_t>(in.blocks) : 0;
  const std::size_t n = blocks * 16 * queries;
  if ((in.nq != 4 && in.nq != 8) || in.blocks < 1 || in.st.size() != n || in.dpt.size() != n ||
      in.lse2.size() != blocks * queries || in.delta.size() != blocks * queries)
    throw std::invalid_argument("ex08 run_score_gradient: nq 4 or 8, blocks >= 1, st and dpt of [blocks][16][8nq], "
                                "lse2 and delta of [blocks][8nq]");
  MemoryMeter meter;
  DeviceBuffer<float> st(meter, n), dpt(meter, n), lse2(meter, in.lse2.size()), delta(meter, in.delta.size()),
      p(meter, n), ds(meter, n);
  st.upload(in.st.data(), n);
  dpt.upload(in.dpt.data(), n);
  lse2.upload(in.lse2.data(), in.lse2.size());
  delta.upload(in.delta.data(), in.delta.size());
  p.poison();  // NaN: what the kernel does not write fails
  ds.poison();
  const int none = kNoHole;
  FA_CUDA_CHECK(cudaMemcpyToSymbol(g_hole_reached, &none, sizeof none));

  const KernelArgs a{st.data(), dpt.data(), lse2.data(), delta.data(), p.data(), ds.data(), in.scale_log2};
  if (in.nq == 8) score_gradient_kernel<8><<<static_cast<unsigned>(blocks), 32>>>(a);
  else score_gradient_kernel<4><<<static_cast<unsigned>(blocks), 32>>>(a);
  FA_CUDA_CHECK_LAUNCH();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  int reached = kNoHole;
  FA_CUDA_CHECK(cudaMemcpyFromSymbol(&reached, g_hole_reached, sizeof reached));
  if (reached != kNoHole) throw TodoNotDone(kHoleMessages[reached]);

  GradientTileResult out;
  out.p.resize(n);
  out.ds.resize(n);
  p.download(out.p.data(), n);
  ds.download(out.ds.data(), n);
  return out;
}

}  // namespace fa::ex08
