#include "fa/dtype.hpp"

#include <bit>

#include "fa/problem.hpp"

namespace fa {

const char* to_string(DType t) {
  switch (t) {
    case DType::float32: return "float32";
    case DType::float16: return "float16";
    case DType::bfloat16: return "bfloat16";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  if (name == "float32") return DType::float32;
  if (name == "float16") return DType::float16;
  if (name == "bfloat16") return DType::bfloat16;
  throw UsageError("--dtype must be float32, float16 or bfloat16, got '" + std::string(name) + "'");
}

std::size_t size_of(DType t) { return t == DType::float32 ? 4 : 2; }

double unit_roundoff(DType t) {
  switch (t) {
    case DType::float32: return 0x1.0p-24;
    case DType::float16: return 0x1.0p-11;
    case DType::bfloat16: return 0x1.0p-8;
  }
  return 0x1.0p-24;
}

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1Fu;
  std::uint32_t mant = h & 0x3FFu;
  std::uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal half: renormalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3FFu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

std::uint16_t float_to_half(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t exp = (x >> 23) & 0xFFu;
  std::uint32_t mant = x & 0x7FFFFFu;
  if (exp == 0xFF) return sign | 0x7C00u | (mant ? 0x200u : 0u);  // Inf or NaN
  const int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return sign | 0x7C00u;                               // overflow to Inf
  if (e <= 0) {                                                     // subnormal or zero
    if (e < -10) return sign;
    mant |= 0x800000u;
    const int shift = 14 - e;
    std::uint32_t half_mant = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_mant & 1u))) ++half_mant;
    return sign | static_cast<std::uint16_t>(half_mant);
  }
  std::uint32_t half = (static_cast<std::uint32_t>(e) << 10) | (mant >> 13);
  const std::uint32_t rem = mant & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // round to nearest even
  return sign | static_cast<std::uint16_t>(half);
}

float bfloat16_to_float(std::uint16_t bits) { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

std::uint16_t float_to_bfloat16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7F800000u) == 0x7F800000u && (x & 0x7FFFFFu)) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  const std::uint32_t rounding = 0x7FFFu + ((x >> 16) & 1u);  // ties to even
  return static_cast<std::uint16_t>((x + rounding) >> 16);
}

float round_to(DType t, float x) {
  switch (t) {
    case DType::float32: return x;
    case DType::float16: return half_to_float(float_to_half(x));
    case DType::bfloat16: return bfloat16_to_float(float_to_bfloat16(x));
  }
  return x;
}

}  // namespace fa
