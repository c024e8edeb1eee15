// gpu_run.cuh — one GPU forward on fresh device buffers, for the tests of stages 04 and 05: inputs
// uploaded, outputs poisoned with NaN (an element the kernel does not write fails every
// comparison), the meter read (memory beyond Q, K, V, O, LSE), O and LSE downloaded.
#pragma once

#include <doctest/doctest.h>

#include <limits>

#include "fa/cuda/check.cuh"
#include "fa/cuda/device_buffer.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/reference.hpp"
#include "fa/tensor.hpp"

namespace fa::testing {

struct GpuRun {
  AttentionResult out;
  std::int64_t extra_bytes = 0;  // meter peak beyond the five tensors
  std::map<std::string, double> counters;
};

template <class Forward>
GpuRun run_gpu(Forward&& forward, const Problem& p, const AttentionData& in) {
  GpuRun r{AttentionResult(p, std::numeric_limits<float>::quiet_NaN())};
  MemoryMeter meter;
  DeviceBuffer<float> q(meter, in.q.values().size()), k(meter, in.k.values().size()), v(meter, in.v.values().size());
  DeviceBuffer<float> o(meter, static_cast<std::size_t>(p.q_elements())), lse(meter, static_cast<std::size_t>(p.lse_elements()));
  q.upload(in.q.data(), q.size());
  k.upload(in.k.data(), k.size());
  v.upload(in.v.data(), v.size());
  o.poison();
  lse.poison();
  const std::int64_t io_bytes = meter.current();
  {
    DeviceContext ctx(meter);
    forward(p, AttentionInputs{q.data(), k.data(), v.data()}, AttentionOutputs{o.data(), lse.data()}, ctx);
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    r.counters = ctx.counters;
  }
  r.extra_bytes = meter.peak() - io_bytes;
  o.download(r.out.o.data(), o.size());
  lse.download(r.out.lse.data(), lse.size());
  return r;
}

inline Problem problem(std::int64_t b, std::int64_t h, std::int64_t nq, std::int64_t nk, std::int64_t d, bool causal) {
  Problem p;
  p.batch = b;
  p.heads = h;
  p.seq_q = nq;
  p.seq_k = nk;
  p.dim = d;
  p.causal = causal;
  return p;
}

// O and LSE against the float64 loop, every element.
inline void check_against_f64(const Problem& p, const AttentionData& in, const AttentionResult& got, Tolerance tol,
                              const char* who) {
  const ReferenceF64 ref = reference_attention_f64(p, in);
  const CompareReport o = compare(std::string("O ") + who + " vs float64", got.o.values(), ref.o, tol);
  const CompareReport lse = compare(std::string("LSE ") + who + " vs float64", got.lse.values(), ref.lse, tol);
  CHECK_MESSAGE(o.ok(), o.summary());
  CHECK_MESSAGE(lse.ok(), lse.summary());
}

// Rows that see no key (causal, Nq > Nk): O = 0 and LSE = −inf exactly; the others finite.
inline void check_empty_rows(const Problem& p, const AttentionResult& got) {
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads; ++h)
      for (std::int64_t i = 0; i < p.seq_q; ++i) {
        const float lse = got.lse.at(b, h, i, 0);
        if (p.keys_visible(i) == 0) {
          CHECK_MESSAGE(lse == -std::numeric_limits<float>::infinity(), "row " << i << " LSE " << lse);
          for (std::int64_t d = 0; d < p.dim; ++d) CHECK_MESSAGE(got.o.at(b, h, i, d) == 0.0f, "row " << i);
        } else {
          CHECK_MESSAGE(std::isfinite(lse), "row " << i << " LSE " << lse);
        }
      }
}

}  // namespace fa::testing
