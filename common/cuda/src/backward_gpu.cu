#include "fa/cuda/backward_gpu.cuh"

#include <algorithm>
#include <vector>

#include "fa/cuda/device.cuh"
#include "fa/cuda/nvtx.cuh"
#include "fa/reference.hpp"

namespace fa {

namespace {

// The device side of one backward case: every buffer counted on the meter.
struct DeviceBackwardProblem {
  DeviceBuffer<float> q, k, v, d_o, o, lse, dq, dk, dv;
  DeviceBackwardProblem(MemoryMeter& meter, const Problem& p, const BackwardData& data)
      : q(meter, data.in.q.values().size()),
        k(meter, data.in.k.values().size()),
        v(meter, data.in.v.values().size()),
        d_o(meter, data.d_o.values().size()),
        o(meter, static_cast<std::size_t>(p.q_elements())),
        lse(meter, static_cast<std::size_t>(p.lse_elements())),
        dq(meter, static_cast<std::size_t>(p.q_elements())),
        dk(meter, static_cast<std::size_t>(p.kv_elements())),
        dv(meter, static_cast<std::size_t>(p.kv_elements())) {
    q.upload(data.in.q.data(), q.size());
    k.upload(data.in.k.data(), k.size());
    v.upload(data.in.v.data(), v.size());
    d_o.upload(data.d_o.data(), d_o.size());
    o.poison();
    lse.poison();
    poison_gradients();
  }
  void poison_gradients() {
    dq.poison();
    dk.poison();
    dv.poison();
  }
  AttentionInputs inputs() const { return {q.data(), k.data(), v.data()}; }
  AttentionOutputs outputs() { return {o.data(), lse.data()}; }
  AttentionGradients gradients() { return {dq.data(), dk.data(), dv.data()}; }
  void download(BackwardResult& out) const {
    o.download(out.o.data(), o.size());
    lse.download(out.lse.data(), lse.size());
    dq.download(out.dq.data(), dq.size());
    dk.download(out.dk.data(), dk.size());
    dv.download(out.dv.data(), dv.size());
  }
};

}  // namespace

BackwardRun run_backward_once(const Problem& p, const BackwardData& data, const DeviceForward& forward,
                              const DeviceBackward& backward, const Options* options) {
  BackwardRun run;
  MemoryMeter meter;
  DeviceBackwardProblem dev(meter, p, data);
  run.io_bytes = meter.current();
  meter.reset_peak();
  DeviceContext ctx(meter);
  ctx.options = options;
  forward(p, dev.inputs(), dev.outputs(), ctx);
  backward(p, dev.inputs(), dev.o.data(), dev.lse.data(), dev.d_o.data(), dev.gradients(), ctx);
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  run.extra_bytes = meter.peak() - run.io_bytes;
  run.out = BackwardResult(p, 0.0f);
  dev.download(run.out);
  return run;
}

BackwardVariant gpu_backward_variant(std::string stage, std::string name, bool ours, DeviceForward forward,
                                     DeviceBackward backward, std::int64_t max_seq) {
  BackwardVariant v;
  v.stage = stage;
  v.name = name;
  v.ours = ours;
  v.max_seq = max_seq;
  const std::string range = "step" + stage + "/" + name + "/backward";
  v.run = [forward, backward, range](const Problem& p, const BackwardData& data, BackwardResult& out,
                                     const RunConfig& cfg) {
    Measurement m;
    MemoryMeter meter(cfg.mem_limit_bytes);
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    const std::int64_t driver_before = DriverMemoryProbe::used_bytes();
    DeviceBackwardProblem dev(meter, p, data);
    const std::int64_t io_bytes = meter.current();
    DeviceContext ctx(meter);
    ctx.options = cfg.options;
    forward(p, dev.inputs(), dev.outputs(), ctx);
    {
      NvtxRange r(range.c_str());
      backward(p, dev.inputs(), dev.o.data(), dev.lse.data(), dev.d_o.data(), dev.gradients(), ctx);
    }
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    dev.download(out);  // the verified result: one forward and one backward on poisoned buffers
    m.peak_bytes = meter.peak();
    m.extra_bytes = meter.peak() - io_bytes;
    m.values["driver_used_bytes"] = static_cast<double>(DriverMemoryProbe::used_bytes() - driver_before);
    m.values["io_bytes"] = static_cast<double>(io_bytes);
    for (const auto& [k, val] : ctx.counters) m.values[k] = val;

    const AttentionInputs in = dev.inputs();
    const AttentionGradients grads = dev.gradients();
    m.time = time_device(
        [&](cudaStream_t) { backward(p, in, dev.o.data(), dev.lse.data(), dev.d_o.data(), grads, ctx); },
        ctx.stream, cfg.warmup, cfg.reps);
    KernelSplit split;
    ctx.split = &split;
    for (int i = 0; i < std::min(cfg.reps, 5); ++i) {
      backward(p, in, dev.o.data(), dev.lse.data(), dev.d_o.data(), grads, ctx);
      split.collect();
    }
    m.split_ms = split.median_ms();
    return m;
  };
  return v;
}

DeviceForward float64_forward(const AttentionData& in) {
  return [&in](const Problem& p, const AttentionInputs&, const AttentionOutputs& out, DeviceContext& ctx) {
    const ReferenceF64 ref = reference_attention_f64(p, in);
    const std::vector<float> o(ref.o.begin(), ref.o.end()), lse(ref.lse.begin(), ref.lse.end());
    FA_CUDA_CHECK(cudaMemcpyAsync(out.o, o.data(), o.size() * sizeof(float), cudaMemcpyHostToDevice, ctx.stream));
    FA_CUDA_CHECK(cudaMemcpyAsync(out.lse, lse.data(), lse.size() * sizeof(float), cudaMemcpyHostToDevice, ctx.stream));
    FA_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));  // the host vectors die here
  };
}

void use_gpu_defaults(BackwardStageDefinition& def) {
  def.skip_reason = [] { return cuda_skip_reason(); };
  def.metadata = [](const std::string& command) { return device_metadata(command); };
  def.default_mem_limit_gb = 0.0;
  def.default_warmup = 2;
  def.default_reps = 10;
}

}  // namespace fa
