// Exercise 07 — the online softmax on the tensor cores' accumulator registers: a row's max across
// the 4 threads that hold it, then P, alpha and l, for the 16 rows of one warp.
//
// This is stage 07's online_softmax (steps/07_tensor_cores/fragment_softmax.cuh), whole, with two
// holes between `// >>> ex07:TAG` and `// <<< ex07:TAG`: replace the device_todo(...) line with your
// code and leave the markers (the course check compares what is between them with the stage). Read
// the stage file's header first: after an mma.sync m16n8k16, with g = lane / 4 and t = lane % 4, a
// thread holds s[n][0], s[n][1] = row g, keys 8n + 2t and 8n + 2t + 1 of the tile, and s[n][2],
// s[n][3] = the same keys of row g + 8. Row r of the function (0: row g, 1: row g + 8) is
// s[n][2r], s[n][2r + 1] for n < NT: 2·NT of the row's Bc = 8·NT scores; the other three threads
// of the group (lanes 4g .. 4g + 3) hold the rest.
//
//   ex07:row_max      m_new = the max of m[r] and of row r's scores in this tile: first over the
//                     thread's own 2·NT values, then across its group (two __shfl_xor_sync).
//   ex07:exp_and_sum  base = m_new·scale_log2, or 0 when m_new = −inf (a row that has seen only
//                     masked scores); alpha[r] = 2^(m[r]·scale_log2 − base), with the OLD m[r];
//                     then m[r] = m_new; each of row r's scores s → P = 2^(s·scale_log2 − base),
//                     in place (fa::ptx::ex2); l[r] = alpha[r]·l[r] + the sum of this thread's P.
//                     l stays a per-thread partial: the caller sums the group once, at the end.
//
// Device code cannot throw, so a hole calls device_todo(hole): it records the hole in a device
// flag, and the launcher, after the kernel, throws fa::TodoNotDone naming the first hole reached.
//
// Check your work (needs a GPU of compute capability 8.0 or newer; without one the checks report
// "skipped"):
//   cmake --build build --target check_ex07
// The chapter is docs/07_tensor_cores.md; the answer is in solutions/07_tensor_cores/.
// Outside the holes this file is the stage's online_softmax and group_sum in namespace fa::ex07,
// the device_todo machinery, and a test kernel with its launcher: each warp loads 16 rows of
// scores, tile after tile, into the C-fragment layout, calls your online_softmax, and keeps
// Õ = alpha·Õ + P·V on the CUDA cores (stage 07 does that product with mma.sync). The checks
// (checks.cu) compare every tile's P and alpha, the final m and l, and O = Õ / l with float64.
//
// What you should see when it passes (on a GPU): five `ok` lines, then `5 of 5 checks pass.`
// Without a GPU the checks report skipped (exit 77): that is not a pass.
// Hints, one at a time:
//   1. Which lanes hold row 5 of the 16? (g = 5: lanes 20..23, t = 0..3.) Its max needs the values
//      of all four; lane ^ 1 and lane ^ 2 reach the other three without leaving the group.
//   2. Everything is in log2 units with the scale folded in: P = 2^(s·scale_log2 − m·scale_log2)
//      is one FFMA and one ex2 per score, ptx::ex2(fmaf(s, scale_log2, −base)); alpha is
//      2^(m_old·scale_log2 − base) with both products rounded alike (__fmul_rn), so that it is exactly
//      1 when the max did not move, and 0 on a row's first tile (m = −inf).
//   3. for (int n = 0; n < NT; ++n) m_new = fmaxf(m_new, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
//      then m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, k)) for k = 1 and k = 2.
//      const float base = m_new == -INFINITY ? 0.0f : __fmul_rn(m_new, scale_log2);
//      alpha[r] = ptx::ex2(__fmul_rn(m[r], scale_log2) - base); m[r] = m_new; P and its sum over n; then
//      l[r] = l[r] * alpha[r] + sum.
// Common mistakes: alpha = ex2(m[r] * scale_log2 - base): the compiler fuses it into an FMA whose
// result is the rounding error of m·scale_log2, not 0, so alpha = 1 ± 3e-7 at every tile and l
// drifts (the checks may pass; the stage's LSE at N = 16k did not: chapter 07);
// the max over the thread's own values only (no shuffles: the four threads of a
// row then disagree on m, and on alpha); shuffling with xor 4, 8 or 16, which reaches other
// groups, that is other rows; subtracting m = −inf for a row that has seen only masked scores
// (−inf − (−inf) = NaN); updating m[r] before alpha is computed from the old one; summing l across
// the group in every tile (it must stay a partial: group_sum adds the four at the end); forgetting
// to rescale l by alpha.
#include "fragment_softmax_exercise.cuh"

#include <climits>
#include <cmath>
#include <cstddef>
#include <stdexcept>

#include "fa/cuda/check.cuh"
#include "fa/cuda/device_buffer.cuh"
#include "fa/cuda/ptx/mma.cuh"
#include "fa/exercise.hpp"

namespace fa::ex07 {

namespace {

// ---- FA_TODO for device code --------------------------------------------------------------------
enum Hole : int { kRowMax = 0, kExpAndSum = 1, kNoHole = INT_MAX };
const char* const kHoleMessages[] = {
    "TODO(ex07:row_max) is not done yet: m_new = max(m[r], row r's scores s[n][2r], s[n][2r+1] of this "
    "tile), then across the 4 threads of the group (__shfl_xor_sync with 1 and 2)",
    "TODO(ex07:exp_and_sum) is not done yet: base = __fmul_rn(m_new, scale_log2) (0 when m_new = -inf), alpha[r] = "
    "ex2(__fmul_rn(m[r], scale_log2) - base), m[r] = m_new, s = ex2(s * scale_log2 - base), l[r] = alpha[r] * l[r] "
    "+ this thread's sum of P",
};
__device__ int g_hole_reached;  // the lowest hole a thread reached; kNoHole: none
[[maybe_unused]] __device__ void device_todo(Hole hole) { atomicMin(&g_hole_reached, static_cast<int>(hole)); }

// ---- stage 07's online softmax (steps/07_tensor_cores/fragment_softmax.cuh) ----------------------

// One tile's update for the two rows a thread holds in one 16-row slice. In: s, the raw scores of
// the tile (masked ones −inf); m, l, the rows' running max and this thread's partial sum. Out: s
// overwritten by P = 2^(s·τlog2e − m_new·τlog2e); m, l updated; alpha[r] = 2^((m_old − m_new)·τlog2e),
// the factor the caller multiplies row r of its O accumulator by.
template <int NT>
__device__ __forceinline__ void online_softmax(float (&s)[NT][4], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                               float scale_log2) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float m_new = m[r];
    // >>> ex07:row_max
#pragma unroll
    for (int n = 0; n < NT; ++n) m_new = fmaxf(m_new, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
    m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 1));
    m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 2));
    // <<< ex07:row_max
    // >>> ex07:exp_and_sum
    // Both scaled maxima rounded alike (__fmul_rn is never fused into an FMA): a max that did not
    // move gives alpha = 2^0 = 1 exactly. Written m[r] * scale_log2 - base, the compiler fuses it
    // into fma(m, c, −round(m·c)), the rounding error of m·c: alpha = 1 ± 3e-7 at every tile, and l
    // drifts with the number of tiles (measured: LSE off by 4.6e-5 at N = 16k, chapter 07).
    const float base = m_new == -INFINITY ? 0.0f : __fmul_rn(m_new, scale_log2);
    alpha[r] = ptx::ex2(__fmul_rn(m[r], scale_log2) - base);
    m[r] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      s[n][2 * r] = ptx::ex2(fmaf(s[n][2 * r], scale_log2, -base));
      s[n][2 * r + 1] = ptx::ex2(fmaf(s[n][2 * r + 1], scale_log2, -base));
      sum += s[n][2 * r] + s[n][2 * r + 1];
    }
    l[r] = l[r] * alpha[r] + sum;
    // <<< ex07:exp_and_sum
  }
}

// The group's total of a per-thread partial sum (the end of the loop: l of each row).
__device__ __forceinline__ float group_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// ---- the test kernel: nothing to write below --------------------------------------------------

constexpr int kMaxWarpsPerBlock = 4;

struct KernelArgs {
  const float* s;  // [slices][16][keys]
  const float* v;  // [keys][kDv]
  float* p;        // [slices][16][keys]
  float* alpha;    // [slices][tiles][16]
  float* m;        // [slices][16]
  float* l;        // [slices][16]
  float* o;        // [slices][16][kDv]
  int tiles;
  float scale_log2;
};

// One warp per 16-row slice: stage 07's loop over K tiles without the mma.sync, which would only
// round the scores to 16 bits. Each tile's scores go straight from memory into the C fragment.
template <int NT>
__global__ void __launch_bounds__(32 * kMaxWarpsPerBlock) softmax_tiles_kernel(const KernelArgs a) {
  const int lane = static_cast<int>(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const int slice = static_cast<int>(blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32);
  const int keys = a.tiles * 8 * NT;
  const std::size_t rows0 = static_cast<std::size_t>(slice) * 16;  // the slice's first row
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, alpha[2];
  float o[2][kDv] = {};  // Õ of rows g and g + 8: like l, over this thread's own keys only

  for (int tile = 0; tile < a.tiles; ++tile) {
    const int k0 = tile * 8 * NT;
    float s[NT][4];  // s[n][2r + e] = S[g + 8r][k0 + 8n + 2t + e], as mma.sync leaves it
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) s[n][i] = a.s[(rows0 + g + 8 * (i / 2)) * keys + k0 + 8 * n + 2 * t + i % 2];
    alpha[0] = alpha[1] = __int_as_float(0x7fc00000);  // NaN: an alpha the function does not set fails

    online_softmax<NT>(s, m, l, alpha, a.scale_log2);

    // What the function returned, for the checks: this tile's P, and alpha (one lane per row).
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) a.p[(rows0 + g + 8 * (i / 2)) * keys + k0 + 8 * n + 2 * t + i % 2] = s[n][i];
    if (t == 0) {
      a.alpha[(static_cast<std::size_t>(slice) * a.tiles + tile) * 16 + g] = alpha[0];
      a.alpha[(static_cast<std::size_t>(slice) * a.tiles + tile) * 16 + g + 8] = alpha[1];
    }
    // The caller's half of the online softmax: Õ = alpha·Õ + P·V_tile.
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int c = 0; c < kDv; ++c) o[r][c] *= alpha[r];
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float* const v_row = a.v + static_cast<std::size_t>(k0 + 8 * n + 2 * t + i % 2) * kDv;
#pragma unroll
        for (int c = 0; c < kDv; ++c) o[i / 2][c] = fmaf(s[n][i], v_row[c], o[i / 2][c]);
      }
  }

  // Once, at the end: l and Õ summed across the group (every lane joins the shuffles), O = Õ / l.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float row_l = group_sum(l[r]);
    float row_o[kDv];
#pragma unroll
    for (int c = 0; c < kDv; ++c) row_o[c] = group_sum(o[r][c]);
    if (t != 0) continue;
    const std::size_t row = rows0 + g + 8 * r;
    a.m[row] = m[r];
    a.l[row] = row_l;
    const float inv_l = row_l > 0.0f ? 1.0f / row_l : 0.0f;  // l = 0: a row with no finite score, O = 0
#pragma unroll
    for (int c = 0; c < kDv; ++c) a.o[row * kDv + c] = row_o[c] * inv_l;
  }
}

}  // namespace

SoftmaxTilesResult run_online_softmax(const SoftmaxTiles& in) {
  const std::size_t keys = in.keys() > 0 ? static_cast<std::size_t>(in.keys()) : 0;
  const std::size_t rows = in.slices > 0 ? 16 * static_cast<std::size_t>(in.slices) : 0;
  if ((in.nt != 8 && in.nt != 16) || in.tiles < 1 || in.slices < 1 || in.warps_per_block < 1 ||
      in.warps_per_block > kMaxWarpsPerBlock || in.slices % in.warps_per_block != 0 ||
      in.s.size() != rows * keys || in.v.size() != keys * kDv)
    throw std::invalid_argument("ex07 run_online_softmax: nt 8 or 16, tiles >= 1, warps_per_block (1..4) dividing "
                                "slices, s of [slices][16][keys] and v of [keys][kDv]");
  const std::size_t n_alpha = rows * static_cast<std::size_t>(in.tiles);
  MemoryMeter meter;
  DeviceBuffer<float> s(meter, in.s.size()), v(meter, in.v.size()), p(meter, in.s.size()), alpha(meter, n_alpha),
      m(meter, rows), l(meter, rows), o(meter, rows * kDv);
  s.upload(in.s.data(), in.s.size());
  v.upload(in.v.data(), in.v.size());
  for (auto* b : {&p, &alpha, &m, &l, &o}) b->poison();  // NaN: what the kernel does not write fails
  const int none = kNoHole;
  FA_CUDA_CHECK(cudaMemcpyToSymbol(g_hole_reached, &none, sizeof none));

  const KernelArgs a{s.data(), v.data(), p.data(), alpha.data(), m.data(), l.data(), o.data(), in.tiles,
                     in.scale_log2};
  const dim3 grid(static_cast<unsigned>(in.slices / in.warps_per_block)), block(32u * in.warps_per_block);
  if (in.nt == 8) softmax_tiles_kernel<8><<<grid, block>>>(a);
  else softmax_tiles_kernel<16><<<grid, block>>>(a);
  FA_CUDA_CHECK_LAUNCH();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  int reached = kNoHole;
  FA_CUDA_CHECK(cudaMemcpyFromSymbol(&reached, g_hole_reached, sizeof reached));
  if (reached != kNoHole) throw TodoNotDone(kHoleMessages[reached]);

  SoftmaxTilesResult out;
  out.p.resize(in.s.size());
  out.alpha.resize(n_alpha);
  out.m.resize(rows);
  out.l.resize(rows);
  out.o.resize(rows * kDv);
  p.download(out.p.data(), out.p.size());
  alpha.download(out.alpha.data(), out.alpha.size());
  m.download(out.m.data(), out.m.size());
  l.download(out.l.data(), out.l.size());
  o.download(out.o.data(), out.o.size());
  return out;
}

}  // namespace fa::ex07
