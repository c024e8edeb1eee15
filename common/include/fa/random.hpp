// random.hpp — seeded input generators. Same seed, same numbers, on every compiler and machine
// (our own splitmix64 generator and Box-Muller, not the standard library's distributions).
//
// Inputs have a non-zero mean on purpose: with zero-mean data a kernel that drops a term can
// still look right, and relative errors lose their meaning.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "fa/tensor.hpp"

namespace fa {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 0xD1B54A32D192ED03ull) {}
  std::uint64_t next_u64();
  double uniform();                          // in [0, 1)
  double normal(double mean, double stddev);

  // splitmix64's state is a counter: `draws` draws later is one addition away. This is what lets
  // fill_normal draw a large tensor on every core and still give the numbers of one loop.
  void skip(std::uint64_t draws) { state_ += draws * kGamma; }
  bool has_spare() const { return has_spare_; }  // normal() draws two at a time and keeps one

 private:
  static constexpr std::uint64_t kGamma = 0x9E3779B97F4A7C15ull;
  std::uint64_t state_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

enum class InputKind {
  normal,        // Q, K, V ~ N(0.5, 1): non-zero mean, scores of order 1
  large_logits,  // Q, K built so that the scaled scores lie around 50..200: overflows a naive exp
  ramp,          // smooth ramps along N and D: every row and column distinct, easy to read
};

InputKind parse_input_kind(std::string_view name);  // throws UsageError
const char* to_string(InputKind kind);

// Every value of t from rng.normal(mean, stddev), in order: the same values, and rng left in the same
// state, as a loop calling rng.normal for each element (large tensors are drawn on all cores).
void fill_normal(HostTensor& t, Rng& rng, double mean, double stddev);

// Fresh Q, K, V for a problem. The same (problem, seed, kind) gives the same tensors.
AttentionData make_inputs(const Problem& p, std::uint64_t seed, InputKind kind = InputKind::normal);

// An upstream gradient dO for the backward stages, same shape as O.
HostTensor make_output_grad(const Problem& p, std::uint64_t seed);

}  // namespace fa
