// dtype.hpp — the element types of the course's tensors, and exact conversions between them.
//
//   float32   IEEE single,  8-bit exponent, 23-bit fraction: unit roundoff u = 2^-24
//   float16   IEEE half,    5-bit exponent, 10-bit fraction: u = 2^-11, largest finite 65504
//   bfloat16  "brain float", 8-bit exponent, 7-bit fraction: u = 2^-8, float32's range
//
// On the host a 16-bit element is stored as its bits (fa::float16_t, fa::bfloat16_t); device code
// uses CUDA's __half and __nv_bfloat16, which have the same bits (fa/cuda/dtype.cuh maps them).
// Conversions to 16 bits round to nearest, ties to even, as the hardware does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fa {

enum class DType : std::uint8_t { float32, float16, bfloat16 };

const char* to_string(DType t);           // "float32", "float16", "bfloat16"
DType parse_dtype(std::string_view name);  // throws UsageError naming the accepted names
std::size_t size_of(DType t);              // bytes per element
double unit_roundoff(DType t);             // 2^-24, 2^-11, 2^-8

struct float16_t {
  std::uint16_t bits = 0;
};
struct bfloat16_t {
  std::uint16_t bits = 0;
};

float half_to_float(std::uint16_t bits);      // exact for every half value
std::uint16_t float_to_half(float f);         // round to nearest even; overflow → ±inf
float bfloat16_to_float(std::uint16_t bits);  // exact
std::uint16_t float_to_bfloat16(float f);     // round to nearest even; NaN stays NaN

// x rounded to the nearest value of type t and back to float: what storing x in t keeps.
float round_to(DType t, float x);

// The dtype of an element type: dtype_of<float>::value == DType::float32. CUDA code adds
// __half and __nv_bfloat16 (fa/cuda/dtype.cuh).
template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::float32;
};
template <>
struct dtype_of<float16_t> {
  static constexpr DType value = DType::float16;
};
template <>
struct dtype_of<bfloat16_t> {
  static constexpr DType value = DType::bfloat16;
};

}  // namespace fa
