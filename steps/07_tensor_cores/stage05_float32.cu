// stage05_float32.cu — see stage05_float32.cuh. The inputs go to float32 by fa::as_float32
// (fa/reference.hpp), the conversion the float64 reference makes too.
#include "07_tensor_cores/stage05_float32.cuh"

#include "05_cuda_causal/flash_causal.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/reference.hpp"

namespace fa::step07 {

namespace {

Problem float32_problem(Problem p) {
  p.dtype = DType::float32;
  return p;
}

void copy_result(const AttentionResult& from, AttentionResult& to) {
  for (std::int64_t i = 0; i < to.o.numel(); ++i) to.o.set(i, from.o.get(i));
  to.lse = from.lse;
}

}  // namespace

bool stage05_runs(const Problem& p) { return p.dim == 32 || p.dim == 64 || p.dim == 128; }

Variant stage05_in_float32() {
  Variant v = gpu_variant("05", "skip-float32", /*ours=*/false, step05::attention_forward);
  v.run = [run = v.run](const Problem& p, const AttentionData& in, AttentionResult& out, const RunConfig& config) {
    const Problem p32 = float32_problem(p);
    AttentionResult out32(p32);
    const Measurement m = run(p32, as_float32(in), out32, config);
    copy_result(out32, out);
    return m;
  };
  return v;
}

ForwardFn stage05_reference() {
  return [forward = gpu_forward(step05::attention_forward)](const Problem& p, const AttentionData& in,
                                                              AttentionResult& out) {
    const Problem p32 = float32_problem(p);
    AttentionResult out32(p32);
    forward(p32, as_float32(in), out32);
    copy_result(out32, out);
  };
}

}  // namespace fa::step07
