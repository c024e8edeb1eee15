// test_flash_backward.cu — stage 06 on the GPU: dQ, dK, dV against the float64 CPU backward at
// awkward shapes, against the materialized GPU backward, the deterministic mode bit for bit, the
// pre-pass, stage 05's forward followed by this backward (O and LSE consistent with float64), and
// the memory: O(N) for the stage, O(N²) for the materialized backward, measured by the meter.
// Every run writes into NaN-poisoned buffers.
//
// The backward's own tests take O and LSE from the float64 forward (fa::float64_forward), so that
// a fault is this stage's and not the forward's; one test runs the real pair, stage 05 + stage 06.
// Needs a CUDA device (exit 77, "skipped", without one).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "06_cuda_backward/flash_backward.cuh"
#include "fa/backward.hpp"
#include "fa/cuda/shared_memory.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/random.hpp"
#include "fa/stage.hpp"
#include "fa/testing.hpp"

namespace {

using fa::testing::problem;

// Whether the backward runs at head dim d on this GPU: every D on an Ampere or Hopper GPU; none on
// a Turing T4 (the key-tile kernel needs 70.5 KiB of shared memory at D = 32, the T4 gives 64), and
// D = 128 not on 99 KiB GPUs. Where it does not, the stage refuses or skips with one line and these
// checks leave the case out.
bool runs_here(std::int64_t d) {
  return fa::step06::skip_reason().empty() && fa::step06::device_refusal(problem(64, 64, d, false)).empty();
}

std::vector<std::int64_t> dims_here(std::initializer_list<std::int64_t> dims = {32, 64, 128}) {
  std::vector<std::int64_t> here;
  for (const std::int64_t d : dims)
    if (runs_here(d)) here.push_back(d);
  return here;
}

// Q, K, V and dO of a backward case, as the harness draws them (fa/stage.hpp).
fa::AttentionData inputs(const fa::Problem& p, std::uint64_t seed, fa::InputKind kind = fa::InputKind::normal) {
  return fa::make_case_inputs(p, fa::Pass::backward, seed, kind);
}

fa::DeviceBackward flash(bool deterministic) {
  return [deterministic](const fa::Problem& p, const fa::AttentionInputs& in, fa::ConstTensorView o,
                         fa::ConstTensorView lse, fa::ConstTensorView d_o, const fa::AttentionGradients& g,
                         fa::DeviceContext& ctx) {
    fa::step06::BackwardOptions options;
    options.deterministic = deterministic;
    fa::step06::attention_backward(p, in, o, lse, d_o, g, ctx, options);
  };
}

const fa::DeviceBackward materialized = fa::step06::attention_backward_materialized;
const fa::DeviceForward stage05 = fa::step06::attention_forward;

// One forward+backward with O and LSE from the float64 forward (which reads `data`: it must be
// the inputs of the run).
fa::GpuRun run(const fa::Problem& p, const fa::AttentionData& data, const fa::DeviceBackward& backward) {
  return fa::run_once(p, data, fa::float64_forward(data), backward);
}

// Two float32 results against each other (flash against materialized): relative to max|ref|.
constexpr double kFloat32PairTol = 1e-4;

// Verification::reports of a backward, in the order verify_backward and compare_backward give them.
enum Report { kDq, kDk, kDv, kO, kLse };

void check(const fa::Verification& v, const std::string& what) {
  std::string reports;
  for (const fa::CompareReport& r : v.reports) reports += "\n  " + r.summary();
  INFO(what << " (" << v.how << ")" << reports);
  CHECK(v.ok());
}

}  // namespace

TEST_CASE("stage 06 against the float64 backward at awkward shapes, every D, causal on and off, both dQ modes") {
  struct Shape {
    std::int64_t nq, nk;
  };
  // N = 1, tails that are no multiple of 64, Nq != Nk both ways (causal Nq > Nk: rows that see no
  // key; causal Nq < Nk: queries at the end of a longer sequence), exact tiles.
  const Shape shapes[] = {{1, 1}, {1, 77}, {77, 1}, {64, 64}, {130, 130}, {200, 67}, {67, 200}, {129, 257}};
  int cases = 0;
  for (const std::int64_t d : dims_here())
    for (const bool causal : {false, true})
      for (const Shape& s : shapes)
        for (const bool deterministic : {false, true}) {
          const fa::Problem p = problem(s.nq, s.nk, d, causal, 2, 2);
          const fa::AttentionData data = inputs(p, 1000 + cases, fa::InputKind::normal);
          const fa::GpuRun r = run(p, data, flash(deterministic));
          check(fa::verify_backward(p, data, r.out, true, 0, 1),
                p.describe() + (deterministic ? " deterministic" : " atomic dQ"));
          ++cases;
        }
  CHECK(cases == 32 * static_cast<int>(dims_here().size()));  // 8 shapes, causal or not, both dQ modes
}

TEST_CASE("stage 06 with large logits (scores 50..200) and ramp inputs") {
  for (const bool causal : {false, true})
    for (const std::int64_t d : dims_here()) {
      const fa::Problem p = problem(150, 190, d, causal, 1, 3);
      const fa::AttentionData big = inputs(p, 7, fa::InputKind::large_logits);
      check(fa::verify_backward(p, big, run(p, big, flash(false)).out, true, 0, 1), p.describe() + " large logits");
      const fa::AttentionData ramp = inputs(p, 7, fa::InputKind::ramp);
      check(fa::verify_backward(p, ramp, run(p, ramp, flash(true)).out, true, 0, 1),
            p.describe() + " ramp, deterministic");
    }
}

TEST_CASE("stage 06 against the materialized GPU backward, and the materialized one against float64") {
  for (const bool causal : {false, true})
    for (const std::int64_t d : dims_here({64, 128})) {
      const fa::Problem p = problem(300, 333, d, causal, 2, 3);
      const fa::AttentionData data = inputs(p, 21, fa::InputKind::normal);
      const fa::GpuRun ours = run(p, data, flash(false));
      const fa::GpuRun theirs = run(p, data, materialized);
      check(fa::compare_backward(ours.out, theirs.out, kFloat32PairTol), p.describe() + " flash vs materialized");
      check(fa::verify_backward(p, data, theirs.out, true, 0, 1), p.describe() + " materialized vs f64");
    }
}

TEST_CASE("stage 05's forward, then stage 06's backward: O, LSE and the gradients against float64") {
  for (const bool causal : {false, true})
    for (const std::int64_t d : dims_here()) {
      const fa::Problem p = problem(200, 67 + d, d, causal, 2, 2);  // causal Nq > Nk: blind rows too
      const fa::AttentionData data = inputs(p, 40 + d, fa::InputKind::normal);
      check(fa::verify_backward(p, data, fa::run_once(p, data, stage05, flash(false)).out, true, 0, 1),
            p.describe() + " stage 05 forward + stage 06 backward");
    }
}

TEST_CASE("sampled-row verification at a larger size (the executable's path), stage 05's forward") {
  const fa::Problem p = problem(1500, 1500, 64, true, 2, 4);
  if (!runs_here(p.dim)) return;  // a GPU without the shared memory (above)
  const fa::AttentionData data = inputs(p, 5, fa::InputKind::normal);
  const fa::GpuRun r = fa::run_once(p, data, stage05, flash(false));
  const fa::Verification v = fa::verify_backward(p, data, r.out, false, 24, 5);
  check(v, p.describe() + " sampled");
  CHECK(v.reports[kDq].count >= 2 * 24 * 64);
}

TEST_CASE("--deterministic: dQ is bitwise identical run to run; dK, dV are in both modes") {
  const fa::Problem p = problem(777, 777, 64, true, 2, 4);
  if (!runs_here(p.dim)) return;  // a GPU without the shared memory (above)
  const fa::AttentionData data = inputs(p, 11, fa::InputKind::normal);
  // Two runs of the deterministic mode (BackwardOptions::deterministic, the executable's
  // --deterministic), each on fresh poisoned buffers.
  const fa::GpuRun a = run(p, data, flash(true));
  const fa::GpuRun b = run(p, data, flash(true));
  auto same_bits = [](const fa::HostTensor& x, const fa::HostTensor& y) {
    return x.bytes() == y.bytes() && std::memcmp(x.data(), y.data(), x.bytes()) == 0;
  };
  CHECK(same_bits(a.out.dq, b.out.dq));
  CHECK(same_bits(a.out.dk, b.out.dk));
  CHECK(same_bits(a.out.dv, b.out.dv));
  const fa::GpuRun c = run(p, data, flash(false));
  const fa::GpuRun d = run(p, data, flash(false));
  CHECK(same_bits(c.out.dk, d.out.dk));  // no atomics in dK, dV
  CHECK(same_bits(c.out.dv, d.out.dv));
  // The atomic dQ is allowed to differ in its last bits, not more.
  check(fa::compare_backward(c.out, a.out, kFloat32PairTol), "atomic dQ vs deterministic dQ");
  check(fa::verify_backward(p, data, a.out, false, 24, 3), "deterministic vs f64");
}

TEST_CASE("the pre-pass delta = rowsum(dO * O)") {
  const fa::Problem p = problem(97, 97, 128, false, 2, 3);
  const fa::HostTensor o = fa::make_inputs(p, 4).q, d_o = fa::make_output_grad(p, 4);
  fa::MemoryMeter meter;
  fa::DeviceBuffer<float> o_dev(meter, o.values().size()), do_dev(meter, d_o.values().size()),
      delta(meter, static_cast<std::size_t>(p.lse_elements()));
  o_dev.upload(o.data(), o.values().size());
  do_dev.upload(d_o.data(), d_o.values().size());
  delta.poison();
  fa::step06::launch_delta(p, o_dev.data(), do_dev.data(), delta.data(), nullptr);
  std::vector<float> got(delta.size());
  delta.download(got.data(), got.size());
  std::vector<double> ref(delta.size(), 0.0);
  for (std::size_t r = 0; r < ref.size(); ++r)
    for (std::int64_t d = 0; d < p.dim; ++d)
      ref[r] += double(o.values()[r * p.dim + d]) * d_o.values()[r * p.dim + d];
  const fa::CompareReport rep = fa::compare("delta", got, ref, fa::gradient_tolerance(ref, 1e-5));
  INFO(rep.summary());
  CHECK(rep.ok());
}

TEST_CASE("memory: the stage keeps nothing N×N (O(N), measured at N, 2N, 4N); the materialized one is O(N²)") {
  std::vector<double> ours, theirs;
  const std::int64_t base = 512;
  for (const std::int64_t n : {base, 2 * base, 4 * base}) {
    const fa::Problem p = problem(n, n, 64, true, 1, 4);
    if (!runs_here(p.dim)) return;  // a GPU without the shared memory (above)
    const fa::AttentionData data = inputs(p, 2, fa::InputKind::normal);
    // The real pair (stage 05's forward): the meter sees everything both allocate.
    const fa::GpuRun a = fa::run_once(p, data, stage05, flash(false));
    const fa::GpuRun b = fa::run_once(p, data, stage05, materialized);
    MESSAGE("N=" << n << ": extra memory over forward+backward: stage 06 " << a.extra_bytes << " B, materialized "
                 << b.extra_bytes << " B");
    ours.push_back(static_cast<double>(a.extra_bytes));
    theirs.push_back(static_cast<double>(b.extra_bytes));
    const double nn_bytes = static_cast<double>(p.heads_total() * n * n) * sizeof(float);
    CHECK(a.extra_bytes > 0);                                 // delta is measured, not assumed away
    CHECK(static_cast<double>(a.extra_bytes) < nn_bytes / 16);  // nothing near N×N
    CHECK(static_cast<double>(b.extra_bytes) >= 2 * nn_bytes);  // S/P and dP/dS
  }
  // Linear growth: doubling N at most doubles the stage's extra memory (plus a little slack) ...
  CHECK(ours[1] <= 2.05 * ours[0]);
  CHECK(ours[2] <= 2.05 * ours[1]);
  // ... while the materialized backward's grows 4x.
  CHECK(theirs[1] >= 3.9 * theirs[0]);
  CHECK(theirs[2] >= 3.9 * theirs[1]);
}

TEST_CASE("the head dims this GPU cannot give the shared memory are refused in one line, not failed launches") {
  // On an H100 (227 KiB per block) every D runs; below that, each D left out is a UsageError.
  if (fa::shared_memory_per_block_optin() >= 227 * 1024) CHECK(dims_here().size() == 3);
  if (!fa::step06::skip_reason().empty()) return;  // nothing runs here: the stage skips (exit 77)
  for (const std::int64_t d : {32, 64, 128}) {
    if (runs_here(d)) continue;
    const fa::Problem p = problem(8, 8, d, false, 1, 1);
    const fa::AttentionData data = inputs(p, 1, fa::InputKind::normal);
    CHECK_THROWS_AS(run(p, data, flash(false)), fa::UsageError);
  }
}

TEST_CASE("an unsupported head dimension is a usage error, not a crash") {
  const fa::Problem p = problem(8, 8, 48, false, 1, 1);
  const fa::AttentionData data = inputs(p, 1, fa::InputKind::normal);
  // The forward may or may not support D = 48; the backward must say no in one clear line.
  const fa::DeviceForward no_forward = [](const fa::Problem&, const fa::AttentionInputs&, const fa::AttentionOutputs&,
                                          fa::DeviceContext&) {};
  CHECK_THROWS_AS(fa::run_once(p, data, no_forward, flash(false)), fa::UsageError);
  CHECK_THROWS_AS(fa::run_once(p, data, no_forward, flash(true)), fa::UsageError);
}

TEST_CASE("a poisoned gradient that is never written fails the verification (the check can fail)") {
  const fa::Problem p = problem(70, 70, 32, true, 1, 2);
  if (!runs_here(p.dim)) return;  // a GPU without the shared memory (above)
  const fa::AttentionData data = inputs(p, 9, fa::InputKind::normal);
  const fa::DeviceBackward skips_dk = [](const fa::Problem& pp, const fa::AttentionInputs& in,
                                         fa::ConstTensorView o, fa::ConstTensorView lse, fa::ConstTensorView d_o,
                                         const fa::AttentionGradients& g, fa::DeviceContext& ctx) {
    fa::step06::attention_backward(pp, in, o, lse, d_o, g, ctx, {});
    // Poison dK again after the backward wrote it: as if the kernel had skipped it.
    FA_CUDA_CHECK(cudaMemset(g.dk.data, 0xFF, g.dk.bytes()));
  };
  const fa::Verification v = fa::verify_backward(p, data, run(p, data, skips_dk).out, true, 0, 1);
  CHECK_FALSE(v.reports[kDk].ok());
  CHECK(v.reports[kDq].ok());
  // And a small error in one element of dV fails too.
  fa::AttentionResult bent = run(p, data, flash(false)).out;
  bent.dv.values()[5] += 1e-3f * std::fabs(bent.dv.values()[5]) + 1e-3f;
  CHECK_FALSE(fa::verify_backward(p, data, bent, true, 0, 1).reports[kDv].ok());
}
