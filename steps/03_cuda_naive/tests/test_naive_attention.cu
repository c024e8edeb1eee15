// Stage 03 on the GPU: each kernel alone against float64 (S, P and LSE, O), then both variants
// end to end against the float64 reference and stage 02, at the awkward shapes of stages 01/02,
// every D, causal on and off, large logits; rows that see no key; the measured memory (S and P:
// N²); the per-kernel split; a bad shape. Outputs are poisoned with NaN before every launch, so an
// element a kernel does not write fails. Exit 77 (skipped) without a CUDA device.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "02_cpu_online_softmax/online_softmax.hpp"
#include "03_cuda_naive/naive_attention.cuh"
#include "fa/compare.hpp"
#include "fa/cuda/device_buffer.cuh"
#include "fa/cuda/event_timer.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/random.hpp"
#include "fa/reference.hpp"
#include "fa/stage.hpp"
#include "fa/testing.hpp"

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

using fa::testing::problem;
using fa::testing::Shape;

// The grid of every stage (fa/testing.hpp: N = 1, no multiple of 32, the tile here, Nq != Nk both
// ways, D = 16..128), and four more: tiles of exactly 32 and one short, and D = 8 and 100 (the
// kernels take any D).
const std::vector<Shape> kShapes = [] {
  std::vector<Shape> shapes(std::begin(fa::testing::kAwkwardShapes), std::end(fa::testing::kAwkwardShapes));
  shapes.insert(shapes.end(), {{31, 33, 128}, {32, 32, 32}, {20, 30, 8}, {40, 50, 100}});
  return shapes;
}();

// A device copy of a host vector, and a NaN-poisoned device buffer of n floats.
fa::DeviceBuffer<float> upload(fa::MemoryMeter& meter, std::span<const float> host) {
  fa::DeviceBuffer<float> b(meter, host.size());
  b.upload(host.data(), host.size());
  return b;
}
fa::DeviceBuffer<float> poisoned(fa::MemoryMeter& meter, std::int64_t n) {
  fa::DeviceBuffer<float> b(meter, static_cast<std::size_t>(n));
  b.poison();
  return b;
}
std::vector<float> download(const fa::DeviceBuffer<float>& b) {
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> host(b.size());
  b.download(host.data(), host.size());
  return host;
}

// ---- float64 pieces, straight from the definitions ----------------------------------------------

// S = scale · Q Kᵀ for every head, [B·H, Nq, Nk].
std::vector<double> scores_f64(const fa::Problem& p, const fa::AttentionData& in) {
  std::vector<double> s(static_cast<std::size_t>(p.heads_total() * p.seq_q * p.seq_k));
  const double scale = p.softmax_scale();
  std::size_t idx = 0;
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads; ++h)
      for (std::int64_t i = 0; i < p.seq_q; ++i)
        for (std::int64_t j = 0; j < p.seq_k; ++j) {
          double acc = 0.0;
          for (std::int64_t d = 0; d < p.dim; ++d) acc += double(in.q.at(b, h, i, d)) * double(in.k.at(b, h, j, d));
          s[idx++] = scale * acc;
        }
  return s;
}

// P and LSE from float32 scores, in float64: the softmax kernel's exact answer for its input.
void softmax_f64(const fa::Problem& p, const std::vector<float>& s, std::vector<double>& pr, std::vector<double>& lse) {
  pr.assign(s.size(), 0.0);
  lse.assign(static_cast<std::size_t>(p.lse_elements()), kNegInf);
  const std::int64_t rows = p.heads_total() * p.seq_q;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t visible = p.keys_visible(r % p.seq_q);
    if (visible == 0) continue;
    const float* row = s.data() + r * p.seq_k;
    double m = -std::numeric_limits<double>::infinity(), l = 0.0;
    for (std::int64_t j = 0; j < visible; ++j) m = std::max(m, double(row[j]));
    for (std::int64_t j = 0; j < visible; ++j) l += std::exp(double(row[j]) - m);
    for (std::int64_t j = 0; j < visible; ++j) pr[r * p.seq_k + j] = std::exp(double(row[j]) - m) / l;
    lse[r] = m + std::log(l);
  }
}

// O = P V, in float64, from float32 P.
std::vector<double> pv_f64(const fa::Problem& p, const std::vector<float>& pr, const fa::AttentionData& in) {
  std::vector<double> o(static_cast<std::size_t>(p.q_elements()), 0.0);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads; ++h) {
      const std::int64_t head = b * p.heads + h;
      for (std::int64_t i = 0; i < p.seq_q; ++i)
        for (std::int64_t d = 0; d < p.dim; ++d) {
          double acc = 0.0;
          for (std::int64_t j = 0; j < p.seq_k; ++j)
            acc += double(pr[(head * p.seq_q + i) * p.seq_k + j]) * double(in.v.at(b, h, j, d));
          o[(head * p.seq_q + i) * p.dim + d] = acc;
        }
    }
  return o;
}

void expect_ok(const fa::CompareReport& c) { CHECK_MESSAGE(c.ok(), c.summary()); }

// One full forward of a stage-03 variant on poisoned outputs; also returns the meter's peak.
struct Forward {
  fa::AttentionResult out;
  std::int64_t extra_bytes = 0;  // peak beyond inputs and outputs, measured
};
Forward forward(const fa::DeviceForward& fn, const fa::Problem& p, const fa::AttentionData& in) {
  fa::MemoryMeter meter;
  fa::DeviceCase dev(meter, p, in, fa::Pass::forward);
  const std::int64_t io = meter.current();
  Forward f{fa::AttentionResult(p)};
  {
    fa::DeviceContext ctx(meter);
    fn(p, dev.inputs(), dev.outputs(), ctx);
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    f.extra_bytes = meter.peak() - io;
  }
  CHECK(meter.current() == io);  // the context gave its scratch back
  dev.download(f.out);
  return f;
}

const fa::DeviceForward kNaive = fa::step03::attention_forward_naive;
const fa::DeviceForward kCublas = fa::step03::attention_forward_cublas;

// Both variants against float64 and against stage 02 (the stage this one is verified against).
void check_end_to_end(const fa::Problem& p, const fa::AttentionData& in, fa::Tolerance tol) {
  const fa::ReferenceF64 ref = fa::reference_attention_f64(p, in);
  fa::AttentionResult before(p);
  fa::host_forward(fa::step02::attention_forward)(p, in, before);
  for (const auto& [name, fn] : {std::pair{"naive", kNaive}, std::pair{"cublas", kCublas}}) {
    INFO(name << " " << p.describe());
    const Forward f = forward(fn, p, in);
    expect_ok(fa::compare("O vs float64", f.out.o.values(), ref.o, tol));
    expect_ok(fa::compare("LSE vs float64", f.out.lse.values(), ref.lse, tol));
    expect_ok(fa::compare("O vs stage 02", f.out.o.values(), before.o.values(), tol));
    expect_ok(fa::compare("LSE vs stage 02", f.out.lse.values(), before.lse.values(), tol));
  }
}

}  // namespace

TEST_CASE("kernel qk alone: S = scale * Q K^T against float64, every shape and D") {
  std::uint64_t seed = 300;
  for (const fa::InputKind kind : {fa::InputKind::normal, fa::InputKind::large_logits})
    for (const Shape& sh : kShapes) {
      const fa::Problem p = problem(sh.nq, sh.nk, sh.d, false);
      INFO(p.describe() << " " << fa::to_string(kind));
      const fa::AttentionData in = fa::make_inputs(p, ++seed, kind);
      fa::MemoryMeter meter;
      auto q = upload(meter, in.q.values()), k = upload(meter, in.k.values());
      auto s = poisoned(meter, p.heads_total() * p.seq_q * p.seq_k);
      fa::step03::launch_qk(p, q.data(), k.data(), s.data(), nullptr);
      FA_CUDA_CHECK_LAUNCH();
      expect_ok(fa::compare("S", download(s), scores_f64(p, in), fa::tolerance_for(fa::kFloat32Tol, kind)));
    }
}

TEST_CASE("kernel qk honours a custom scale") {
  fa::Problem p = problem(40, 50, 32, false);
  p.scale = 0.37f;
  const fa::AttentionData in = fa::make_inputs(p, 31);
  fa::MemoryMeter meter;
  auto q = upload(meter, in.q.values()), k = upload(meter, in.k.values());
  auto s = poisoned(meter, p.heads_total() * p.seq_q * p.seq_k);
  fa::step03::launch_qk(p, q.data(), k.data(), s.data(), nullptr);
  FA_CUDA_CHECK_LAUNCH();
  expect_ok(fa::compare("S", download(s), scores_f64(p, in), fa::kFloat32Tol));
}

TEST_CASE("kernel softmax alone: P and LSE against float64, causal and not, large logits, long rows") {
  std::vector<Shape> shapes = kShapes;
  shapes.push_back({5, 1000, 16});   // rows longer than the block's 256 threads: the strided loop
  shapes.push_back({300, 257, 16});  // Nq > Nk, causal: the first 43 rows see no key
  std::uint64_t seed = 600;
  for (const fa::InputKind kind : {fa::InputKind::normal, fa::InputKind::large_logits})
    for (const Shape& sh : shapes)
      for (const bool causal : {false, true}) {
        const fa::Problem p = problem(sh.nq, sh.nk, sh.d, causal);
        INFO(p.describe() << " " << fa::to_string(kind));
        const fa::AttentionData in = fa::make_inputs(p, ++seed, kind);
        const std::vector<double> s64 = scores_f64(p, in);
        const std::vector<float> s32(s64.begin(), s64.end());  // the kernel's input, exactly representable
        std::vector<double> p64, lse64;
        softmax_f64(p, s32, p64, lse64);
        fa::MemoryMeter meter;
        auto s = upload(meter, s32);
        auto pr = poisoned(meter, static_cast<std::int64_t>(s32.size())), lse = poisoned(meter, p.lse_elements());
        fa::step03::launch_softmax(p, s.data(), pr.data(), lse.data(), nullptr);
        FA_CUDA_CHECK_LAUNCH();
        // Given exact float32 scores, the softmax's own error is a few ulps: the float32 tolerance
        // holds for large logits too (the 10x widening is for the rounding of the scores).
        expect_ok(fa::compare("P", download(pr), p64, fa::kFloat32Tol));
        expect_ok(fa::compare("LSE", download(lse), lse64, fa::kFloat32Tol));
      }
}

TEST_CASE("kernel pv alone: O = P V against float64, every shape and D") {
  std::uint64_t seed = 900;
  for (const Shape& sh : kShapes)
    for (const bool causal : {false, true}) {
      const fa::Problem p = problem(sh.nq, sh.nk, sh.d, causal);
      INFO(p.describe());
      const fa::AttentionData in = fa::make_inputs(p, ++seed);
      const std::vector<double> s64 = scores_f64(p, in);
      std::vector<double> p64, lse64;
      softmax_f64(p, std::vector<float>(s64.begin(), s64.end()), p64, lse64);
      const std::vector<float> p32(p64.begin(), p64.end());
      fa::MemoryMeter meter;
      auto pr = upload(meter, p32), v = upload(meter, in.v.values());
      auto o = poisoned(meter, p.q_elements());
      fa::step03::launch_pv(p, pr.data(), v.data(), o.data(), nullptr);
      FA_CUDA_CHECK_LAUNCH();
      expect_ok(fa::compare("O", download(o), pv_f64(p, p32, in), fa::kFloat32Tol));
    }
}

TEST_CASE("naive and cublas end to end against float64 and stage 02, awkward shapes, causal and not") {
  std::uint64_t seed = 1200;
  for (const Shape& sh : kShapes)
    for (const bool causal : {false, true}) {
      const fa::Problem p = problem(sh.nq, sh.nk, sh.d, causal);
      check_end_to_end(p, fa::make_inputs(p, ++seed), fa::kFloat32Tol);
    }
}

TEST_CASE("large logits end to end: scores of 50 to 200 do not overflow") {
  const fa::Tolerance tol = fa::tolerance_for(fa::kFloat32Tol, fa::InputKind::large_logits);
  std::uint64_t seed = 1500;
  for (const Shape& sh : kShapes)
    for (const bool causal : {false, true}) {
      const fa::Problem p = problem(sh.nq, sh.nk, sh.d, causal);
      check_end_to_end(p, fa::make_inputs(p, ++seed, fa::InputKind::large_logits), tol);
    }
}

TEST_CASE("ramp inputs and a longer sequence (several tiles on every axis)") {
  for (const bool causal : {false, true}) {
    const fa::Problem p = problem(129, 200, 64, causal);
    check_end_to_end(p, fa::make_inputs(p, 1, fa::InputKind::ramp), fa::kFloat32Tol);
    const fa::Problem q = problem(300, 300, 32, causal);
    check_end_to_end(q, fa::make_inputs(q, 2), fa::kFloat32Tol);
  }
}

TEST_CASE("rows that see no key (causal, Nq > Nk) give O = 0 and LSE = -inf, never NaN") {
  const fa::Problem p = problem(100, 30, 64, true);  // rows 0..69 see nothing
  const fa::AttentionData in = fa::make_inputs(p, 14);
  for (const auto& [name, fn] : {std::pair{"naive", kNaive}, std::pair{"cublas", kCublas}}) {
    const Forward f = forward(fn, p, in);
    for (std::int64_t i = 0; i < p.seq_q; ++i) {
      INFO(std::string(name) << " row " << i);
      const float lse = f.out.lse.at(1, 1, i, 0);
      REQUIRE(!std::isnan(lse));
      if (p.keys_visible(i) == 0) {
        CHECK(lse == -std::numeric_limits<float>::infinity());
        for (std::int64_t d = 0; d < p.dim; ++d) CHECK(f.out.o.at(1, 1, i, d) == 0.0f);
      } else {
        CHECK(std::isfinite(lse));
      }
    }
  }
}

TEST_CASE("measured memory: S and P, B*H*Nq*Nk floats each, so 4x when N doubles") {
  for (const Shape& sh : {Shape{77, 129, 32}, Shape{1, 1, 16}, Shape{200, 33, 64}}) {
    const fa::Problem p = problem(sh.nq, sh.nk, sh.d, false);
    INFO(p.describe());
    const fa::AttentionData in = fa::make_inputs(p, 21);
    const std::int64_t s_and_p = 2 * p.heads_total() * p.seq_q * p.seq_k * std::int64_t{sizeof(float)};
    CHECK(forward(kNaive, p, in).extra_bytes == s_and_p);
    CHECK(forward(kCublas, p, in).extra_bytes == s_and_p + (std::int64_t{32} << 20));  // + cuBLAS workspace
  }
  const fa::Problem n = problem(256, 256, 16, true), n2 = problem(512, 512, 16, true);
  const double growth = static_cast<double>(forward(kNaive, n2, fa::make_inputs(n2, 22)).extra_bytes) /
                        static_cast<double>(forward(kNaive, n, fa::make_inputs(n, 22)).extra_bytes);
  CHECK(growth == 4.0);
}

TEST_CASE("the harness sees the three kernels by name: qk, softmax, pv") {
  const fa::Problem p = problem(64, 96, 32, false);
  const fa::AttentionData in = fa::make_inputs(p, 23);
  for (const auto& fn : {kNaive, kCublas}) {
    fa::MemoryMeter meter;
    fa::DeviceCase dev(meter, p, in, fa::Pass::forward);
    fa::DeviceContext ctx(meter);
    fa::KernelSplit split;
    ctx.split = &split;
    fn(p, dev.inputs(), dev.outputs(), ctx);
    split.collect();
    const auto ms = split.median_ms();
    CHECK(ms.size() == 3);
    for (const char* name : {"qk", "softmax", "pv"}) {
      INFO(std::string(name));
      REQUIRE(ms.count(name) == 1);
      CHECK(ms.at(name) >= 0.0);
    }
  }
}

TEST_CASE("a shape past the grid limits is a clear UsageError, not a bad launch") {
  fa::Problem p = problem(1, 1, 16, false);
  p.batch = 65536;  // B·H = 131072 heads along grid.z (at most 65535)
  p.heads = 2;
  const fa::AttentionData in = fa::make_inputs(p, 24);
  CHECK_THROWS_AS(forward(kNaive, p, in), fa::UsageError);
}
