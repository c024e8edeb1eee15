// .npy files as [B, H, N, D] tensors: read in the file's dtype, written as float32.
#include <cstring>

#include "fa/npy.hpp"

namespace fa {

HostTensor read_npy_tensor(const std::string& path) {
  NpyArray a = read_npy(path);
  if (a.shape.size() != 4) {
    std::string s;
    for (auto d : a.shape) s += (s.empty() ? "" : ",") + std::to_string(d);
    throw UsageError(path + ": expected a 4-d [B,H,N,D] array, got shape (" + s + ")");
  }
  HostTensor t(Shape4{a.shape[0], a.shape[1], a.shape[2], a.shape[3]}, a.dtype);
  if (t.bytes() != a.data.size()) throw UsageError(path + ": the data does not match its shape");
  if (!a.data.empty()) std::memcpy(t.raw(), a.data.data(), a.data.size());  // a zero dimension: no buffer at all
  return t;
}

void write_npy_tensor(const std::string& path, const HostTensor& t) {
  const Shape4 s = t.shape();
  const std::vector<float> values = t.to_float();
  write_npy(path, {s.b, s.h, s.n, s.d}, values.data());
}

void write_npy_lse(const std::string& path, const HostTensor& lse) {
  const Shape4 s = lse.shape();
  const std::vector<float> values = lse.to_float();
  write_npy(path, {s.b, s.h, s.n}, values.data());
}

}  // namespace fa
