// ladder.cu — the host side of stage 07's ladder: the stage's checks, dispatch on dtype and D,
// launch. The kernels and what each adds: ladder.cuh and the v*.cuh files beside it.
#include "07_tensor_cores/ladder/ladder.cuh"

#include "07_tensor_cores/ladder/v1_mma.cuh"
#include "07_tensor_cores/ladder/v2_ldmatrix.cuh"
#include "07_tensor_cores/ladder/v3_cp_async.cuh"
#include "07_tensor_cores/ladder/v4_registers.cuh"
#include "07_tensor_cores/ladder/v5_addresses.cuh"
#include "fa/cuda/tc/launch.cuh"

namespace fa::step07::ladder {

namespace {

// v5: 16 rows per warp (Br = 64) and Bc = 64, as v1 .. v4 have.
template <int D>
using V5 = V5Config<D, 4, 1, 64, 2>;

// The rungs run D = 64 and 128: the ladder's measurements are made there.
void require_rung_dim(const Problem& p, const char* name) {
  p.require(kSupports);
  if (p.dim != 64 && p.dim != 128)
    throw UsageError(std::string("stage 07 ") + name + " runs D = 64 and 128 (the stage's kernel, flash, runs " +
                     "32, 64, 96, 128, 256), not D = " + std::to_string(p.dim));
}

template <template <class, int> class Rung>
void run(const char* name, const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
         DeviceContext& ctx) {
  require_rung_dim(p, name);
  if (p.dtype == DType::float16) {
    if (p.dim == 64) Rung<__half, 64>::launch(name, p, in, out, ctx);
    else Rung<__half, 128>::launch(name, p, in, out, ctx);
  } else {
    if (p.dim == 64) Rung<__nv_bfloat16, 64>::launch(name, p, in, out, ctx);
    else Rung<__nv_bfloat16, 128>::launch(name, p, in, out, ctx);
  }
}

template <class T, int D>
struct LaunchV1 {
  static void launch(const char* name, const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                     DeviceContext& ctx) {
    tc::launch<T, v1_mma_kernel<T, D>, 128, V1<D>::kBr, V1<D>::kSmemBytes>(name, p, in, out, ctx);
  }
};
template <class T, int D>
struct LaunchV2 {
  static void launch(const char* name, const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                     DeviceContext& ctx) {
    tc::launch<T, v2_ldmatrix_kernel<T, D>, 128, V2<D>::kBr, V2<D>::kSmemBytes>(name, p, in, out, ctx);
  }
};
template <class T, int D>
struct LaunchV3 {
  static void launch(const char* name, const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                     DeviceContext& ctx) {
    tc::launch<T, v3_cp_async_kernel<T, D>, 128, V3<D>::kBr, V3<D>::kSmemBytes>(name, p, in, out, ctx);
  }
};
template <class T, int D>
struct LaunchV4 {
  static void launch(const char* name, const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                     DeviceContext& ctx) {
    tc::launch<T, v4_registers_kernel<T, D>, 128, V4<D>::kBr, V4<D>::kSmemBytes>(name, p, in, out, ctx);
  }
};
template <class T, int D>
struct LaunchV5 {
  static void launch(const char* name, const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                     DeviceContext& ctx) {
    using C = V5<D>;
    tc::launch<T, v5_addresses_kernel<T, C>, C::kThreads, C::kBr, C::kSmemBytes>(name, p, in, out, ctx);
  }
};

}  // namespace

void v1_mma(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx) {
  run<LaunchV1>("v1_mma", p, in, out, ctx);
}
void v2_ldmatrix(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx) {
  run<LaunchV2>("v2_ldmatrix", p, in, out, ctx);
}
void v3_cp_async(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx) {
  run<LaunchV3>("v3_cp_async", p, in, out, ctx);
}
void v4_registers(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx) {
  run<LaunchV4>("v4_registers", p, in, out, ctx);
}
void v5_addresses(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out, DeviceContext& ctx) {
  run<LaunchV5>("v5_addresses", p, in, out, ctx);
}

}  // namespace fa::step07::ladder
