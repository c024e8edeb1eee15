// tensor.hpp — typed tensors: the views every stage function takes, and the host tensors behind them.
//
// A stage's forward reads and writes TensorViews: a pointer, a dtype (float32, float16, bfloat16),
// a [B, H, N, D] shape and strides in elements. Host stages get host pointers, GPU stages device
// pointers; the Problem carries the sizes. A kernel asks for its element type with `as<T>()`,
// which refuses (UsageError, exit 2) a dtype or layout the stage was not written for:
//
//     const float* q = in.q.as<float>();        // stages 01–06: float32, contiguous
//     const __half* q = in.q.as<__half>();       // a float16 stage (fa/cuda/dtype.cuh)
//
// LSE is always float32, stored as [B, H, Nq, 1].
#pragma once

#include <Eigen/Core>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "fa/dtype.hpp"
#include "fa/problem.hpp"

namespace fa {

// Whether `p` is 16-byte aligned: what kernels that move 16-byte chunks (cp.async, int4 loads) need
// of every tensor they are given (stages 04, 07, 08 refuse others with one line).
inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// A row-major matrix, the layout of one head of a [B, H, N, D] tensor.
using MatrixRM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapRM = Eigen::Map<MatrixRM>;
using ConstMapRM = Eigen::Map<const MatrixRM>;

struct Shape4 {
  std::int64_t b = 0, h = 0, n = 0, d = 0;
  std::int64_t numel() const { return b * h * n * d; }
  bool operator==(const Shape4&) const = default;
  std::string str() const;  // "[2,8,512,64]"
};

// Strides in elements; the default is the contiguous row-major layout of the shape.
struct Strides4 {
  std::int64_t b = 0, h = 0, n = 0, d = 0;
  static Strides4 contiguous(const Shape4& s) { return {s.h * s.n * s.d, s.n * s.d, s.d, 1}; }
  bool operator==(const Strides4&) const = default;
};

namespace detail {
// Throws UsageError unless (dtype, strides) is what `want` and a contiguous layout ask for.
void check_view(DType have, DType want, const Shape4& shape, const Strides4& strides);
}  // namespace detail

template <class Pointer>
struct BasicTensorView {
  Pointer data = nullptr;
  DType dtype = DType::float32;
  Shape4 shape;
  Strides4 strides;

  BasicTensorView() = default;
  BasicTensorView(Pointer p, DType t, Shape4 s) : data(p), dtype(t), shape(s), strides(Strides4::contiguous(s)) {}
  BasicTensorView(Pointer p, DType t, Shape4 s, Strides4 st) : data(p), dtype(t), shape(s), strides(st) {}
  // A view of writable data is also a view of readable data.
  template <class Other>
    requires std::is_convertible_v<Other, Pointer>
  BasicTensorView(const BasicTensorView<Other>& o) : data(o.data), dtype(o.dtype), shape(o.shape), strides(o.strides) {}

  bool contiguous() const { return strides == Strides4::contiguous(shape); }
  std::int64_t numel() const { return shape.numel(); }
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * size_of(dtype); }

  // The data as T, for a stage that was written for T and a contiguous layout.
  template <class T>
  auto as() const {
    detail::check_view(dtype, dtype_of<std::remove_const_t<T>>::value, shape, strides);
    if constexpr (std::is_const_v<std::remove_pointer_t<Pointer>>)
      return static_cast<const std::remove_const_t<T>*>(data);
    else
      return static_cast<T*>(data);
  }
};
using TensorView = BasicTensorView<void*>;
using ConstTensorView = BasicTensorView<const void*>;

namespace detail {
// An allocator whose new elements are left uninitialised, so that a large tensor's pages are
// first touched by a fill on every core (HostTensor's constructor) and not by one thread's zeroing:
// tens of gigabytes for a long sequence's inputs.
template <class T>
struct UninitializedAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <class U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;  // default-initialised: for std::byte, nothing is written
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
}  // namespace detail

// Owning, contiguous host tensor [B, H, N, D] of any dtype. LSE is stored as [B, H, Nq, 1].
// The float accessors (data, values, head, at) are for float32 tensors; `get` reads any dtype.
class HostTensor {
 public:
  HostTensor() = default;
  explicit HostTensor(Shape4 shape, float fill = 0.0f);  // float32
  HostTensor(Shape4 shape, DType dtype, float fill = 0.0f);

  const Shape4& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  std::int64_t numel() const { return shape_.numel(); }
  std::size_t bytes() const { return bytes_.size(); }
  void* raw() { return bytes_.data(); }
  const void* raw() const { return bytes_.data(); }

  // Every byte 0xFF: a NaN in float32, float16 and bfloat16 alike, so an element nobody writes
  // fails every comparison.
  void poison();
  float get(std::int64_t flat) const;               // element `flat` as float, any dtype
  void set(std::int64_t flat, float value);         // rounded to the dtype
  HostTensor converted(DType to) const;             // a copy in another dtype (round to nearest)
  std::vector<float> to_float() const;              // every element as float

  float* data();                                    // float32 only (std::logic_error otherwise)
  const float* data() const;
  std::span<float> values() { return {data(), static_cast<std::size_t>(numel())}; }
  std::span<const float> values() const { return {data(), static_cast<std::size_t>(numel())}; }

  std::int64_t head_offset(std::int64_t b, std::int64_t h) const { return (b * shape_.h + h) * shape_.n * shape_.d; }
  // The [N, D] matrix of head (b, h), as an Eigen view without a copy (float32).
  MapRM head(std::int64_t b, std::int64_t h) { return MapRM(data() + head_offset(b, h), shape_.n, shape_.d); }
  ConstMapRM head(std::int64_t b, std::int64_t h) const {
    return ConstMapRM(data() + head_offset(b, h), shape_.n, shape_.d);
  }
  float& at(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
    return data()[head_offset(b, h) + i * shape_.d + j];
  }
  float at(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return data()[head_offset(b, h) + i * shape_.d + j];
  }

  TensorView view() { return {raw(), dtype_, shape_}; }
  ConstTensorView view() const { return {raw(), dtype_, shape_}; }

 private:
  Shape4 shape_;
  DType dtype_ = DType::float32;
  std::vector<std::byte, detail::UninitializedAllocator<std::byte>> bytes_;
};

// Rows [row0, row0 + rows) of every (batch, head) of `from` into rows [to_row0, to_row0 + rows) of
// every (batch, head) of `to`, byte for byte: the same B, H, width and dtype (LSE has width 1).
// On every core: a long sequence's rows are gigabytes (stage 12 cuts sequences out of a packed
// batch this way, stage 13 a rank's chunks out of the whole sequence).
void copy_rows(const HostTensor& from, std::int64_t row0, HostTensor& to, std::int64_t to_row0, std::int64_t rows);

// [B, H, N, D]; a packed batch's [1, H, total, D] (problem.hpp).
inline Shape4 q_shape(const Problem& p) {
  return p.packed() ? Shape4{1, p.heads, p.total_tokens(), p.dim} : Shape4{p.batch, p.heads, p.seq_q, p.dim};
}
inline Shape4 kv_shape(const Problem& p) {
  return p.packed() ? Shape4{1, p.kv_heads(), p.total_tokens(), p.dim} : Shape4{p.batch, p.kv_heads(), p.seq_k, p.dim};
}
inline Shape4 lse_shape(const Problem& p) {
  return p.packed() ? Shape4{1, p.heads, p.total_tokens(), 1} : Shape4{p.batch, p.heads, p.seq_q, 1};
}

// What every stage's forward reads and writes.
struct AttentionInputs {
  ConstTensorView q;  // [B, Hq, Nq, D]
  ConstTensorView k;  // [B, Hkv, Nk, D]
  ConstTensorView v;  // [B, Hkv, Nk, D]
};
struct AttentionOutputs {
  TensorView o;    // [B, Hq, Nq, D], the inputs' dtype
  TensorView lse;  // [B, Hq, Nq, 1], float32
};
// What a backward writes: [B,Hq,Nq,D], [B,Hkv,Nk,D], [B,Hkv,Nk,D] in the inputs' dtype.
struct AttentionGradients {
  TensorView dq, dk, dv;
};

// Host-side owning sets, used by the harness, the tests and the .npy loader.
struct AttentionData {
  HostTensor q, k, v;
  HostTensor d_o;  // the upstream gradient dO (backward cases only; empty otherwise)
  AttentionInputs view() const { return {q.view(), k.view(), v.view()}; }
};
struct AttentionResult {
  HostTensor o, lse;
  HostTensor dq, dk, dv;  // backward cases only
  AttentionResult() = default;
  // O (in p.dtype) and LSE (float32) poisoned with NaN; a backward pass adds dQ, dK, dV.
  explicit AttentionResult(const Problem& p, Pass pass = Pass::forward);
  AttentionOutputs view() { return {o.view(), lse.view()}; }
  AttentionGradients gradients() { return {dq.view(), dk.view(), dv.view()}; }
};

}  // namespace fa
