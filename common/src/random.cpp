#include "fa/random.hpp"

#include <cmath>
#include <numbers>
#include <span>

#include "fa/parallel.hpp"

namespace fa {

std::uint64_t Rng::next_u64() {
  // splitmix64 (Steele, Lea, Flood 2014): tiny, fast and statistically good enough for test data.
  std::uint64_t z = (state_ += kGamma);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Rng::normal(double mean, double stddev) {
  if (has_spare_) {
    has_spare_ = false;
    return mean + stddev * spare_;
  }
  double u1 = uniform(), u2 = uniform();
  if (u1 < 1e-300) u1 = 1e-300;
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 2.0 * std::numbers::pi * u2;
  spare_ = r * std::sin(theta);
  has_spare_ = true;
  return mean + stddev * r * std::cos(theta);
}

InputKind parse_input_kind(std::string_view name) {
  if (name == "normal") return InputKind::normal;
  if (name == "large-logits" || name == "large_logits") return InputKind::large_logits;
  if (name == "ramp") return InputKind::ramp;
  throw UsageError("--inputs must be normal, large-logits or ramp, got '" + std::string(name) + "'");
}

const char* to_string(InputKind kind) {
  switch (kind) {
    case InputKind::normal: return "normal";
    case InputKind::large_logits: return "large-logits";
    case InputKind::ramp: return "ramp";
  }
  return "?";
}

void fill_normal(HostTensor& t, Rng& rng, double mean, double stddev) {
  std::span<float> v = t.values();
  if (v.empty()) return;
  std::size_t first = 0;
  if (rng.has_spare()) v[first++] = static_cast<float>(rng.normal(mean, stddev));  // the pending half of a pair
  // With no spare pending, element e of what is left comes from the pair of draws 2⌊e/2⌋ and
  // 2⌊e/2⌋ + 1: a range starting at an even e draws alone from a copy of rng moved on by e draws.
  const std::int64_t pairs = static_cast<std::int64_t>(v.size() - first) / 2;
  float* out = v.data() + first;
  parallel_ranges(
      2 * pairs,
      [&](std::int64_t begin, std::int64_t end) {
        Rng own = rng;
        own.skip(static_cast<std::uint64_t>(begin));
        for (std::int64_t e = begin; e < end; ++e) out[e] = static_cast<float>(own.normal(mean, stddev));
      },
      /*align=*/2);
  rng.skip(static_cast<std::uint64_t>(2 * pairs));
  if (first + 2 * static_cast<std::size_t>(pairs) < v.size()) v.back() = static_cast<float>(rng.normal(mean, stddev));  // leaves a spare
}

namespace {

void fill_ramp(HostTensor& t, double row_slope, double col_slope, double offset) {
  const Shape4 s = t.shape();
  for (std::int64_t b = 0; b < s.b; ++b)
    for (std::int64_t h = 0; h < s.h; ++h)
      for (std::int64_t i = 0; i < s.n; ++i)
        for (std::int64_t j = 0; j < s.d; ++j) {
          // A sawtooth along N keeps values bounded for any length; D adds a column pattern.
          const double row = static_cast<double>((i * 37 + (b * s.h + h) * 11) % 101) / 101.0;
          const double col = static_cast<double>(j % 13) / 13.0;
          t.at(b, h, i, j) = static_cast<float>(offset + row_slope * row + col_slope * col);
        }
}

}  // namespace

AttentionData make_inputs(const Problem& p, std::uint64_t seed, InputKind kind) {
  // Each tensor is drawn in float32 and rounded to p.dtype at once (the same inputs at every dtype),
  // before the next is drawn: at most one float32 tensor is alive beside the 16-bit ones.
  AttentionData d;
  Rng rng(seed);
  auto draw = [&](Shape4 shape, auto fill) {
    HostTensor t(shape);
    fill(t);
    return p.dtype == DType::float32 ? t : t.converted(p.dtype);
  };
  auto normal = [&rng](double mean, double stddev) {
    return [&rng, mean, stddev](HostTensor& t) { fill_normal(t, rng, mean, stddev); };
  };
  auto ramp = [](double row_slope, double col_slope, double offset) {
    return [=](HostTensor& t) { fill_ramp(t, row_slope, col_slope, offset); };
  };
  switch (kind) {
    case InputKind::normal:
      d.q = draw(q_shape(p), normal(0.5, 1.0));
      d.k = draw(kv_shape(p), normal(0.5, 1.0));
      d.v = draw(kv_shape(p), normal(0.5, 1.0));
      break;
    case InputKind::large_logits: {
      // With q, k ~ N(mu, sigma) the scaled score q.k * scale has mean mu^2 * D * scale. Pick mu
      // so that the mean is 120 and sigma so that scores spread over roughly 50..200.
      const double scale = p.softmax_scale();
      const double mu = std::sqrt(120.0 / (p.dim * scale));
      d.q = draw(q_shape(p), normal(mu, 0.35 * mu));
      d.k = draw(kv_shape(p), normal(mu, 0.35 * mu));
      d.v = draw(kv_shape(p), normal(0.5, 1.0));
      break;
    }
    case InputKind::ramp:
      d.q = draw(q_shape(p), ramp(2.0, 1.0, -0.5));
      d.k = draw(kv_shape(p), ramp(1.5, -1.0, 0.25));
      d.v = draw(kv_shape(p), ramp(3.0, 0.5, 0.1));
      break;
  }
  return d;
}

HostTensor make_output_grad(const Problem& p, std::uint64_t seed) {
  HostTensor g(q_shape(p));
  Rng rng(seed ^ 0x5DEECE66Dull);
  fill_normal(g, rng, 0.1, 1.0);
  return p.dtype == DType::float32 ? g : g.converted(p.dtype);
}

}  // namespace fa
