// Exercise 07 — what fragment_softmax_exercise.cu defines: a test launcher around stage 07's
// online_softmax (your copy, in fa::ex07), which the checks compare with float64.
#pragma once

#include <vector>

namespace fa::ex07 {

inline constexpr int kDv = 8;  // the columns of the small V that the test kernel multiplies P by

// One run of the test kernel: `slices` warps, each with its own 16 rows of raw scores, fed to
// online_softmax one K tile after the other, as stage 07's loop over K/V tiles does.
struct SoftmaxTiles {
  int nt = 8;               // 8-key column tiles per K tile (NT): Bc = 8·nt keys; 8 or 16
  int tiles = 1;            // K tiles in a row
  int slices = 1;           // 16-row slices, one warp each
  int warps_per_block = 1;  // divides slices; at most 4
  float scale_log2 = 0.0f;  // τ·log2(e)
  std::vector<float> s;     // [slices][16][tiles·Bc] raw scores S = Q·Kᵀ, −inf where masked
  std::vector<float> v;     // [tiles·Bc][kDv]
  int keys() const { return tiles * 8 * nt; }
};

struct SoftmaxTilesResult {
  std::vector<float> p;      // [slices][16][keys]: P of each tile, as online_softmax left it in s
  std::vector<float> alpha;  // [slices][tiles][16]: each tile's alpha
  std::vector<float> m, l;   // [slices][16]: after the last tile; l summed over the group (group_sum)
  std::vector<float> o;      // [slices][16][kDv]: O = Õ / l, Õ = Σ over tiles of alpha-rescaled P·V
};

// Runs the test kernel on the current device and waits for it. Throws fa::TodoNotDone naming the
// first hole of online_softmax that is still a TODO; std::invalid_argument on a malformed `in`.
SoftmaxTilesResult run_online_softmax(const SoftmaxTiles& in);

}  // namespace fa::ex07
