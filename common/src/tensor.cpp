#include "fa/tensor.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "fa/parallel.hpp"

namespace fa {

std::string Shape4::str() const {
  return "[" + std::to_string(b) + "," + std::to_string(h) + "," + std::to_string(n) + "," + std::to_string(d) + "]";
}

namespace detail {
void check_view(DType have, DType want, const Shape4& shape, const Strides4& strides) {
  if (have != want)
    throw UsageError(std::string("a ") + to_string(have) + " tensor was given to code written for " + to_string(want));
  if (!(strides == Strides4::contiguous(shape)))
    throw UsageError("a strided tensor " + shape.str() + " was given to code written for contiguous tensors");
}
}  // namespace detail

HostTensor::HostTensor(Shape4 shape, float fill) : HostTensor(shape, DType::float32, fill) {}

namespace {
// memset on every core: the first touch of a large tensor's pages is most of its cost.
void parallel_memset(std::byte* bytes, int value, std::size_t size) {
  parallel_ranges(static_cast<std::int64_t>(size), [&](std::int64_t begin, std::int64_t end) {
    std::memset(bytes + begin, value, static_cast<std::size_t>(end - begin));
  }, /*align=*/4096, /*serial_below=*/1 << 24);
}
}  // namespace

HostTensor::HostTensor(Shape4 shape, DType dtype, float fill)
    : shape_(shape), dtype_(dtype), bytes_(static_cast<std::size_t>(shape.numel()) * size_of(dtype)) {
  if (fill == 0.0f) {
    parallel_memset(bytes_.data(), 0, bytes_.size());  // 0 is all-zero bytes in every dtype
    return;
  }
  parallel_ranges(numel(), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) set(i, fill);
  });
}

void HostTensor::poison() { parallel_memset(bytes_.data(), 0xFF, bytes_.size()); }

float HostTensor::get(std::int64_t flat) const {
  std::uint16_t bits = 0;
  switch (dtype_) {
    case DType::float32: {
      float f;
      std::memcpy(&f, bytes_.data() + flat * 4, 4);
      return f;
    }
    case DType::float16:
      std::memcpy(&bits, bytes_.data() + flat * 2, 2);
      return half_to_float(bits);
    case DType::bfloat16:
      std::memcpy(&bits, bytes_.data() + flat * 2, 2);
      return bfloat16_to_float(bits);
  }
  return 0.0f;
}

void HostTensor::set(std::int64_t flat, float value) {
  std::uint16_t bits = 0;
  switch (dtype_) {
    case DType::float32: std::memcpy(bytes_.data() + flat * 4, &value, 4); return;
    case DType::float16: bits = float_to_half(value); break;
    case DType::bfloat16: bits = float_to_bfloat16(value); break;
  }
  std::memcpy(bytes_.data() + flat * 2, &bits, 2);
}

HostTensor HostTensor::converted(DType to) const {
  HostTensor out(shape_, to);
  parallel_ranges(numel(), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) out.set(i, get(i));
  });
  return out;
}

std::vector<float> HostTensor::to_float() const {
  std::vector<float> out(static_cast<std::size_t>(numel()));
  parallel_ranges(numel(), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) out[static_cast<std::size_t>(i)] = get(i);
  });
  return out;
}

float* HostTensor::data() {
  if (dtype_ != DType::float32) throw std::logic_error(std::string("HostTensor::data(): a ") + to_string(dtype_) + " tensor");
  return reinterpret_cast<float*>(bytes_.data());
}
const float* HostTensor::data() const {
  if (dtype_ != DType::float32) throw std::logic_error(std::string("HostTensor::data(): a ") + to_string(dtype_) + " tensor");
  return reinterpret_cast<const float*>(bytes_.data());
}

AttentionResult::AttentionResult(const Problem& p, Pass pass)
    : o(q_shape(p), p.dtype), lse(lse_shape(p), DType::float32) {
  o.poison();
  lse.poison();
  if (pass == Pass::backward) {
    dq = HostTensor(q_shape(p), p.dtype);
    dk = HostTensor(kv_shape(p), p.dtype);
    dv = HostTensor(kv_shape(p), p.dtype);
    for (HostTensor* t : {&dq, &dk, &dv}) t->poison();
  }
}

void copy_rows(const HostTensor& from, std::int64_t row0, HostTensor& to, std::int64_t to_row0, std::int64_t rows) {
  const Shape4 f = from.shape(), t = to.shape();
  if (f.b != t.b || f.h != t.h || f.d != t.d || from.dtype() != to.dtype())
    throw std::logic_error("copy_rows: tensors of different batches, heads, widths or dtypes");
  if (rows < 0 || row0 < 0 || to_row0 < 0 || row0 + rows > f.n || to_row0 + rows > t.n)
    throw std::logic_error("copy_rows: the rows lie outside a tensor");
  if (rows == 0) return;
  const std::size_t row_bytes = static_cast<std::size_t>(f.d) * size_of(from.dtype());
  const auto* src = static_cast<const std::byte*>(from.raw());
  auto* dst = static_cast<std::byte*>(to.raw());
  // Over the rows copied, (batch·head)·rows + i; a range may start and end inside a head.
  parallel_ranges(
      f.b * f.h * rows,
      [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t r = begin; r < end;) {
          const std::int64_t head = r / rows, i = r % rows, n = std::min(end - r, rows - i);
          std::memcpy(dst + static_cast<std::size_t>(head * t.n + to_row0 + i) * row_bytes,
                      src + static_cast<std::size_t>(head * f.n + row0 + i) * row_bytes,
                      static_cast<std::size_t>(n) * row_bytes);
          r += n;
        }
      },
      1, /*serial_below=*/std::int64_t{1} << 14);
}

}  // namespace fa
