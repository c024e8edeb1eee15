// tensor.hpp — host tensors [B, H, N, D] on Eigen, and the views that every stage function takes.
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <vector>

#include "fa/problem.hpp"

namespace fa {

// A row-major matrix, the layout of one head of a [B, H, N, D] tensor.
using MatrixRM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapRM = Eigen::Map<MatrixRM>;
using ConstMapRM = Eigen::Map<const MatrixRM>;

struct Shape4 {
  std::int64_t b = 0, h = 0, n = 0, d = 0;
  std::int64_t numel() const { return b * h * n * d; }
  bool operator==(const Shape4&) const = default;
};

// Owning, contiguous float32 [B, H, N, D] tensor. LSE is stored as [B, H, Nq, 1].
class HostTensor {
 public:
  HostTensor() = default;
  explicit HostTensor(Shape4 shape, float fill = 0.0f)
      : shape_(shape), data_(static_cast<std::size_t>(shape.numel()), fill) {}

  const Shape4& shape() const { return shape_; }
  std::int64_t numel() const { return shape_.numel(); }
  std::size_t bytes() const { return data_.size() * sizeof(float); }
  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  std::vector<float>& values() { return data_; }
  const std::vector<float>& values() const { return data_; }

  // The [N, D] matrix of head (b, h), as an Eigen view without a copy.
  std::int64_t head_offset(std::int64_t b, std::int64_t h) const {
    return (b * shape_.h + h) * shape_.n * shape_.d;
  }
  MapRM head(std::int64_t b, std::int64_t h) {
    return MapRM(data() + head_offset(b, h), shape_.n, shape_.d);
  }
  ConstMapRM head(std::int64_t b, std::int64_t h) const {
    return ConstMapRM(data() + head_offset(b, h), shape_.n, shape_.d);
  }
  float& at(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
    return data_[static_cast<std::size_t>(head_offset(b, h) + i * shape_.d + j)];
  }
  float at(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return data_[static_cast<std::size_t>(head_offset(b, h) + i * shape_.d + j)];
  }

 private:
  Shape4 shape_;
  std::vector<float> data_;
};

inline Shape4 q_shape(const Problem& p) { return {p.batch, p.heads, p.seq_q, p.dim}; }
inline Shape4 kv_shape(const Problem& p) { return {p.batch, p.heads, p.seq_k, p.dim}; }
inline Shape4 lse_shape(const Problem& p) { return {p.batch, p.heads, p.seq_q, 1}; }

// What every stage's forward reads and writes: raw pointers to contiguous [B,H,N,D] float32 data,
// on the host for CPU stages and on the device for GPU stages. The Problem carries the shapes.
struct AttentionInputs {
  const float* q = nullptr;  // [B, H, Nq, D]
  const float* k = nullptr;  // [B, H, Nk, D]
  const float* v = nullptr;  // [B, H, Nk, D]
};
struct AttentionOutputs {
  float* o = nullptr;    // [B, H, Nq, D]
  float* lse = nullptr;  // [B, H, Nq]
};

// Host-side owning sets, used by the harness, the tests and the .npy loader.
struct AttentionData {
  HostTensor q, k, v;
  AttentionInputs view() const { return {q.data(), k.data(), v.data()}; }
};
struct AttentionResult {
  HostTensor o, lse;
  AttentionResult() = default;
  explicit AttentionResult(const Problem& p, float poison)
      : o(q_shape(p), poison), lse(lse_shape(p), poison) {}
  AttentionOutputs view() { return {o.data(), lse.data()}; }
};

}  // namespace fa
