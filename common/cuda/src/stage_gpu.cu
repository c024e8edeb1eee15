#include "fa/cuda/stage_gpu.cuh"

#include <algorithm>
#include <vector>

#include "fa/cuda/device.cuh"
#include "fa/cuda/nvtx.cuh"
#include "fa/reference.hpp"

namespace fa {

void* DeviceContext::scratch(const std::string& name, std::size_t bytes) {
  auto it = scratch_.find(name);
  if (it == scratch_.end() || it->second.bytes() < bytes) {
    scratch_.erase(name);  // free the old one first: peak memory is what we measure
    it = scratch_.emplace(name, DeviceBuffer<std::byte>(meter, bytes)).first;
  }
  return it->second.data();
}

void* DeviceContext::scratch_zeroed(const std::string& name, std::size_t bytes) {
  const auto it = scratch_.find(name);
  const bool allocated = it == scratch_.end() || it->second.bytes() < bytes;
  void* data = scratch(name, bytes);
  if (allocated) FA_CUDA_CHECK(cudaMemsetAsync(data, 0, bytes, stream));
  return data;
}

DeviceTensor::DeviceTensor(MemoryMeter& meter, Shape4 shape, DType dtype)
    : buf_(meter, static_cast<std::size_t>(shape.numel()) * size_of(dtype)), shape_(shape), dtype_(dtype) {}

void DeviceTensor::upload(const HostTensor& t) {
  if (!(t.shape() == shape_) || t.dtype() != dtype_ || t.bytes() != buf_.bytes())
    throw std::logic_error("DeviceTensor::upload: a " + std::string(to_string(t.dtype())) + " " + t.shape().str() +
                           " tensor into a " + to_string(dtype_) + " " + shape_.str() + " buffer");
  buf_.upload(static_cast<const std::byte*>(t.raw()), buf_.size());
}

void DeviceTensor::download(HostTensor& t) const {
  if (!(t.shape() == shape_) || t.dtype() != dtype_ || t.bytes() != buf_.bytes())
    throw std::logic_error("DeviceTensor::download: shapes or dtypes differ");
  buf_.download(static_cast<std::byte*>(t.raw()), buf_.size());
}

DeviceCase::DeviceCase(MemoryMeter& meter, const Problem& p, const AttentionData& in, Pass pass_)
    : q(meter, q_shape(p), p.dtype),
      k(meter, kv_shape(p), p.dtype),
      v(meter, kv_shape(p), p.dtype),
      o(meter, q_shape(p), p.dtype),
      lse(meter, lse_shape(p), DType::float32),
      pass(pass_) {
  q.upload(in.q);
  k.upload(in.k);
  v.upload(in.v);
  o.poison();
  lse.poison();
  if (pass == Pass::backward) {
    d_o = DeviceTensor(meter, q_shape(p), p.dtype);
    dq = DeviceTensor(meter, q_shape(p), p.dtype);
    dk = DeviceTensor(meter, kv_shape(p), p.dtype);
    dv = DeviceTensor(meter, kv_shape(p), p.dtype);
    d_o.upload(in.d_o);
    dq.poison();
    dk.poison();
    dv.poison();
  }
}

void DeviceCase::download(AttentionResult& out) const {
  o.download(out.o);
  lse.download(out.lse);
  if (pass == Pass::backward) {
    dq.download(out.dq);
    dk.download(out.dk);
    dv.download(out.dv);
  }
}

namespace {

// The forward, then the backward if there is one, on the case's buffers.
void run_case(const Problem& p, DeviceCase& dev, const DeviceForward& forward, const DeviceBackward& backward,
              DeviceContext& ctx) {
  forward(p, dev.inputs(), dev.outputs(), ctx);
  if (backward) backward(p, dev.inputs(), dev.o.view(), dev.lse.view(), dev.d_o.view(), dev.gradients(), ctx);
}

Variant make_variant(std::string stage, std::string name, bool ours, DeviceForward forward, DeviceBackward backward,
                     std::int64_t max_seq) {
  Variant v;
  v.stage = stage;
  v.name = name;
  v.ours = ours;
  v.max_seq = max_seq;
  const std::string range = "step" + stage + "/" + name + (backward ? "/backward" : "");
  v.run = [forward, backward, range](const Problem& p, const AttentionData& in, AttentionResult& out,
                                     const RunConfig& cfg) {
    const Pass pass = backward ? Pass::backward : Pass::forward;
    Measurement m;
    MemoryMeter meter(cfg.mem_limit_bytes);
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    const std::int64_t driver_before = DriverMemoryProbe::used_bytes();
    DeviceCase dev(meter, p, in, pass);
    const std::int64_t io_bytes = meter.current();
    DeviceContext ctx(meter);
    {
      NvtxRange r(range.c_str());
      run_case(p, dev, forward, backward, ctx);
    }
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    dev.download(out);  // the verified result: from the first run, on poisoned buffers
    m.peak_bytes = meter.peak();
    m.extra_bytes = meter.peak() - io_bytes;
    // The driver's view of the same allocations, tensors included (page-granular: a little above).
    m.driver_bytes = DriverMemoryProbe::used_bytes() - driver_before;

    // Timed: the forward, or the backward alone (the forward's O and LSE stay in place).
    const AttentionInputs ins = dev.inputs();
    auto timed = [&] {
      if (backward) backward(p, ins, dev.o.view(), dev.lse.view(), dev.d_o.view(), dev.gradients(), ctx);
      else forward(p, ins, dev.outputs(), ctx);
    };
    m.time = time_device([&](cudaStream_t) { timed(); }, ctx.stream, cfg.warmup, cfg.reps);
    // Per-kernel times, if the stage marks its kernels: a separate pass, so that the event
    // pairs inside do not disturb the whole-run timing above.
    KernelSplit split;
    ctx.split = &split;
    for (int i = 0; i < std::min(cfg.reps, 10); ++i) {
      timed();
      split.collect();
    }
    m.split_ms = split.median_ms();
    return m;
  };
  return v;
}

}  // namespace

GpuRun run_once(const Problem& p, const AttentionData& in, const DeviceForward& forward, const DeviceBackward& backward) {
  const Pass pass = backward ? Pass::backward : Pass::forward;
  GpuRun run{AttentionResult(p, pass)};
  MemoryMeter meter;
  DeviceCase dev(meter, p, in, pass);
  run.io_bytes = meter.current();
  {
    DeviceContext ctx(meter);
    run_case(p, dev, forward, backward, ctx);
    FA_CUDA_CHECK(cudaDeviceSynchronize());
  }
  run.extra_bytes = meter.peak() - run.io_bytes;
  dev.download(run.out);
  return run;
}

Variant gpu_variant(std::string stage, std::string name, bool ours, DeviceForward forward, std::int64_t max_seq) {
  return make_variant(std::move(stage), std::move(name), ours, std::move(forward), {}, max_seq);
}

Variant gpu_backward_variant(std::string stage, std::string name, bool ours, DeviceForward forward,
                             DeviceBackward backward, std::int64_t max_seq) {
  return make_variant(std::move(stage), std::move(name), ours, std::move(forward), std::move(backward), max_seq);
}

ForwardFn gpu_forward(DeviceForward forward) {
  return [forward](const Problem& p, const AttentionData& in, AttentionResult& out) {
    out = run_once(p, in, forward).out;
  };
}

DeviceForward float64_forward(const AttentionData& in) {
  return [&in](const Problem& p, const AttentionInputs&, const AttentionOutputs& out, DeviceContext& ctx) {
    AttentionResult ref(p);
    reference_forward_f64(p, in, ref);
    FA_CUDA_CHECK(cudaMemcpyAsync(out.o.data, ref.o.raw(), ref.o.bytes(), cudaMemcpyHostToDevice, ctx.stream));
    FA_CUDA_CHECK(cudaMemcpyAsync(out.lse.data, ref.lse.raw(), ref.lse.bytes(), cudaMemcpyHostToDevice, ctx.stream));
    FA_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));  // the host tensors die here
  };
}

void use_gpu_defaults(StageDefinition& def, int min_compute_capability) {
  def.skip_reason = [min_compute_capability] { return cuda_skip_reason(min_compute_capability); };
  def.metadata = [](const std::string& command) { return device_metadata(command); };
  def.default_mem_limit_gb = 0.0;  // the device's own memory is the limit
  def.default_warmup = def.pass == Pass::forward ? 3 : 2;
  def.default_reps = def.pass == Pass::forward ? 20 : 10;
}

}  // namespace fa
