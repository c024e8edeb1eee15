// Exercise 09 — what descriptor_exercise.cu defines: a test launcher around stage 09's matrix
// descriptors (your copy, in fa::ex09): one warpgroup multiplies two tiles with wgmma, reading
// them from shared memory through your descriptors; the checks compare the product with float64.
#pragma once

#include <vector>

namespace fa::ex09 {

// One product D (64 × n) = A (64 × k) · B (k × n), bf16 inputs, float32 D.
struct ProductCase {
  int n = 64;                // 64 or 128
  int k = 64;                // 64 or 128
  bool a_in_registers = false;  // A from registers (loaded by ldmatrix) instead of by descriptor
  bool b_mn_major = false;      // B stored [k][n] (as V is) instead of [n][k] (as K is)
  std::vector<float> a;      // [64][k], values exact in bf16
  std::vector<float> b;      // [k][n] when b_mn_major, else [n][k]; exact in bf16
};

// Runs the product on the current device and waits for it: D as [64][n]. Throws fa::TodoNotDone
// naming the first descriptor function that is still a TODO; std::invalid_argument on a malformed
// case.
std::vector<float> run_product(const ProductCase& c);

}  // namespace fa::ex09
