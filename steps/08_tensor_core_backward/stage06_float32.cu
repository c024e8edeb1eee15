// stage06_float32.cu — see stage06_float32.cuh. The inputs go to float32 by fa::as_float32
// (fa/reference.hpp), the conversion the float64 reference makes too.
#include "08_tensor_core_backward/stage06_float32.cuh"

#include "06_cuda_backward/flash_backward.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/reference.hpp"

namespace fa::step08 {

namespace {

void copy_rounded(const HostTensor& from, HostTensor& to) {
  for (std::int64_t i = 0; i < to.numel(); ++i) to.set(i, from.get(i));
}

}  // namespace

bool stage06_runs(const Problem& p) { return p.dim == 32 || p.dim == 64 || p.dim == 128; }

Variant stage06_in_float32() {
  const DeviceBackward backward = [](const Problem& p, const AttentionInputs& in, ConstTensorView o,
                                     ConstTensorView lse, ConstTensorView d_o, const AttentionGradients& g,
                                     DeviceContext& ctx) {
    step06::attention_backward(p, in, o, lse, d_o, g, ctx, step06::BackwardOptions{});
  };
  Variant v = gpu_backward_variant("06", "flash-float32", /*ours=*/false, step06::attention_forward, backward);
  v.run = [run = v.run](const Problem& p, const AttentionData& in, AttentionResult& out, const RunConfig& config) {
    Problem p32 = p;
    p32.dtype = DType::float32;
    AttentionResult out32(p32, Pass::backward);
    const Measurement m = run(p32, as_float32(in), out32, config);
    copy_rounded(out32.o, out.o);
    out.lse = out32.lse;
    copy_rounded(out32.dq, out.dq);
    copy_rounded(out32.dk, out.dk);
    copy_rounded(out32.dv, out.dv);
    return m;
  };
  return v;
}

}  // namespace fa::step08
