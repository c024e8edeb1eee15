// npy.hpp — read and write NumPy .npy files (format 1.0/2.0/3.0), float32 and float16, C order.
//
// This is how a learner compares any stage with NumPy or PyTorch: --save writes o.npy and lse.npy,
// --load reads q.npy, k.npy, v.npy. Malformed or truncated files are rejected with one clear
// UsageError naming the file and what is wrong.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fa/tensor.hpp"

namespace fa {

struct NpyArray {
  std::vector<std::int64_t> shape;
  std::vector<float> values;  // converted to float32 whatever the file's dtype
  std::string dtype;          // the file's dtype descriptor, e.g. "<f4" or "<f2"
};

NpyArray read_npy(const std::string& path);
void write_npy(const std::string& path, const std::vector<std::int64_t>& shape, const float* values);

// A [B, H, N, D] tensor from a 4-d .npy file (throws UsageError for any other rank).
HostTensor read_npy_tensor(const std::string& path);
void write_npy_tensor(const std::string& path, const HostTensor& t);
// LSE is written as [B, H, Nq].
void write_npy_lse(const std::string& path, const HostTensor& lse);

// IEEE half <-> float, exact for every half value.
float half_to_float(std::uint16_t h);
std::uint16_t float_to_half(float f);

}  // namespace fa
