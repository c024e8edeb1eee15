// dtype.cuh — CUDA's 16-bit element types as course dtypes: a float16 stage asks a view for its
// data with `in.q.as<__half>()`, a bfloat16 stage with `as<__nv_bfloat16>()`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "fa/dtype.hpp"

namespace fa {

template <>
struct dtype_of<__half> {
  static constexpr DType value = DType::float16;
};
template <>
struct dtype_of<__nv_bfloat16> {
  static constexpr DType value = DType::bfloat16;
};

}  // namespace fa
