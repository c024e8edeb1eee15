#include "fa/cuda/stage_gpu.cuh"

#include "fa/cuda/device.cuh"
#include "fa/cuda/nvtx.cuh"

namespace fa {

void* DeviceContext::scratch(const std::string& name, std::size_t bytes) {
  auto it = scratch_.find(name);
  if (it == scratch_.end() || it->second.bytes() < bytes) {
    scratch_.erase(name);  // free the old one first: peak memory is what we measure
    it = scratch_.emplace(name, DeviceBuffer<std::byte>(meter, bytes)).first;
  }
  return it->second.data();
}

namespace {

struct DeviceProblem {
  DeviceBuffer<float> q, k, v, o, lse;
  DeviceProblem(MemoryMeter& meter, const Problem& p, const AttentionData& in)
      : q(meter, in.q.values().size()),
        k(meter, in.k.values().size()),
        v(meter, in.v.values().size()),
        o(meter, static_cast<std::size_t>(p.q_elements())),
        lse(meter, static_cast<std::size_t>(p.lse_elements())) {
    q.upload(in.q.data(), q.size());
    k.upload(in.k.data(), k.size());
    v.upload(in.v.data(), v.size());
    o.poison();
    lse.poison();
  }
  AttentionInputs inputs() const { return {q.data(), k.data(), v.data()}; }
  AttentionOutputs outputs() { return {o.data(), lse.data()}; }
  void download(AttentionResult& out) const {
    o.download(out.o.data(), o.size());
    lse.download(out.lse.data(), lse.size());
  }
};

}  // namespace

Variant gpu_variant(std::string stage, std::string name, bool ours, DeviceForward fn, std::int64_t max_seq) {
  Variant v;
  v.stage = stage;
  v.name = name;
  v.ours = ours;
  v.max_seq = max_seq;
  const std::string range = "step" + stage + "/" + name;
  v.run = [fn, range](const Problem& p, const AttentionData& in, AttentionResult& out, const RunConfig& cfg) {
    Measurement m;
    MemoryMeter meter(cfg.mem_limit_bytes);
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    const std::int64_t driver_before = DriverMemoryProbe::used_bytes();
    DeviceProblem dev(meter, p, in);
    const std::int64_t io_bytes = meter.current();
    DeviceContext ctx(meter);
    ctx.options = cfg.options;
    {
      NvtxRange r(range.c_str());
      fn(p, dev.inputs(), dev.outputs(), ctx);
    }
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    dev.download(out);  // the verified output: from the first run, on poisoned buffers
    m.peak_bytes = meter.peak();
    m.extra_bytes = meter.peak() - io_bytes;
    // The driver's view of the same allocations (page-granular, so a little above the meter).
    m.values["driver_used_bytes"] = static_cast<double>(DriverMemoryProbe::used_bytes() - driver_before);
    m.values["meter_live_bytes"] = static_cast<double>(meter.current());
    for (const auto& [k, val] : ctx.counters) m.values[k] = val;

    m.time = time_device([&](cudaStream_t) { fn(p, dev.inputs(), dev.outputs(), ctx); }, ctx.stream, cfg.warmup,
                         cfg.reps);
    // Per-kernel times, if the stage marks its kernels: a separate pass, so that the event
    // pairs inside do not disturb the whole-forward timing above.
    KernelSplit split;
    ctx.split = &split;
    for (int i = 0; i < std::min(cfg.reps, 10); ++i) {
      fn(p, dev.inputs(), dev.outputs(), ctx);
      split.collect();
    }
    m.split_ms = split.median_ms();
    return m;
  };
  return v;
}

ForwardFn gpu_forward(DeviceForward fn) {
  return [fn](const Problem& p, const AttentionData& in, AttentionResult& out) {
    MemoryMeter meter;
    DeviceProblem dev(meter, p, in);
    DeviceContext ctx(meter);
    fn(p, dev.inputs(), dev.outputs(), ctx);
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    dev.download(out);
  };
}

void use_gpu_defaults(StageDefinition& def) {
  def.skip_reason = [] { return cuda_skip_reason(); };
  def.metadata = [](const std::string& command) { return device_metadata(command); };
  def.default_mem_limit_gb = 0.0;  // the device's own memory is the limit
  def.default_warmup = 3;
  def.default_reps = 20;
}

}  // namespace fa
