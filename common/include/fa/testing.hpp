// testing.hpp — what every stage's tests share: the awkward shapes that one grid covers for every
// stage, the problem maker, and the checks against the float64 reference (doctest), forward and
// backward.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "fa/backward.hpp"
#include "fa/compare.hpp"
#include "fa/problem.hpp"
#include "fa/reference.hpp"
#include "fa/stage.hpp"
#include "fa/tensor.hpp"
#include "fa/verify.hpp"

namespace fa::testing {

// B = 2, H = 2 by default: more than one head, so that a wrong head offset shows.
inline Problem problem(std::int64_t nq, std::int64_t nk, std::int64_t d, bool causal, std::int64_t batch = 2,
                       std::int64_t heads = 2) {
  Problem p;
  p.batch = batch;
  p.heads = heads;
  p.seq_q = nq;
  p.seq_k = nk;
  p.dim = d;
  p.causal = causal;
  return p;
}

struct Shape {
  std::int64_t nq, nk, d;
};

// N = 1, lengths that are no multiple of any tile (32, 64), Nq != Nk both ways (with causal, the
// first rows of Nq > Nk see no key), every head dim of the course (16, 32, 64, 128).
inline constexpr Shape kAwkwardShapes[] = {{1, 1, 64},     {1, 77, 32},   {77, 1, 16},   {77, 77, 64},
                                           {129, 129, 16}, {129, 77, 128}, {77, 129, 32}, {200, 33, 64},
                                           {33, 200, 128}, {64, 65, 16}};

// O and LSE against the float64 loop, every element.
inline void check_against_f64(const Problem& p, const AttentionData& in, const AttentionResult& got, Tolerance tol,
                              const char* who) {
  const ReferenceF64 ref = reference_attention_f64(p, in);
  const CompareReport o = compare(std::string("O ") + who + " vs float64", got.o.to_float(), ref.o, tol,
                                  index_in({p.batch, p.heads, p.seq_q, p.dim}));
  const CompareReport lse = compare(std::string("LSE ") + who + " vs float64", got.lse.values(), ref.lse, tol,
                                    index_in({p.batch, p.heads, p.seq_q}));
  CHECK_MESSAGE(o.ok(), o.summary());
  CHECK_MESSAGE(lse.ok(), lse.summary());
}

// O and LSE against float64 on every row, with the tolerance the problem allows (verify.hpp: a
// small multiple of a plain implementation's error on the same inputs).
inline void check_verified(const Problem& p, const AttentionData& in, const AttentionResult& got, const char* who) {
  VerifyPlan all_rows;
  all_rows.max_full_flops = 1e30;
  const Verification v = verify_forward(p, in, got, all_rows, 0);
  // (error_vs_plain itself may pass kPlainErrorMultiple where the plain error is tiny: the floor
  // of a few units in the last place of |ref| is then what bounds the error.)
  for (const CompareReport& r : v.reports) CHECK_MESSAGE(r.ok(), who << ": " << r.summary());
}

// Rows that see no key (causal, Nq > Nk): O = 0 and LSE = −inf exactly; the others finite.
inline void check_empty_rows(const Problem& p, const AttentionResult& got) {
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads; ++h)
      for (std::int64_t i = 0; i < p.seq_q; ++i) {
        const std::int64_t row = (b * p.heads + h) * p.seq_q + i;
        const float lse = got.lse.get(row);
        if (p.keys_visible(i) == 0) {
          CHECK_MESSAGE(lse == -std::numeric_limits<float>::infinity(), "row " << i << " LSE " << lse);
          for (std::int64_t d = 0; d < p.dim; ++d) CHECK_MESSAGE(got.o.get(row * p.dim + d) == 0.0f, "row " << i);
        } else {
          CHECK_MESSAGE(std::isfinite(lse), "row " << i << " LSE " << lse);
        }
      }
}

// A verification (forward or backward) that must pass, with every report printed when it does not.
inline void check_verification(const Verification& v, const std::string& what) {
  std::string reports;
  for (const CompareReport& r : v.reports) reports += "\n  " + r.summary();
  INFO(what << " (" << v.how << ", error / plain " << v.error_vs_plain << ")" << reports);
  CHECK(v.ok());
}

// A backward's rows that see no key (causal, Nq > Nk; bf16, D = 64): dQ = 0 there, and their dO
// changes nothing in dK and dV. run(p, data) returns the stage's outputs (forward and backward).
template <class Run>
void check_keyless_rows_backward(Run run) {
  Problem p = problem(150, 40, 64, true, 1, 2);  // rows 0 .. 109 see no key
  p.dtype = DType::bfloat16;
  AttentionData data = make_case_inputs(p, Pass::backward, 31, InputKind::normal);
  const AttentionResult a = run(p, data);
  for (std::int64_t h = 0; h < p.heads; ++h)
    for (std::int64_t i = 0; i < 110; ++i)
      for (std::int64_t c = 0; c < p.dim; ++c) CHECK(a.dq.get((h * p.seq_q + i) * p.dim + c) == 0.0f);
  // Their upstream gradient must not matter.
  for (std::int64_t h = 0; h < p.heads; ++h)
    for (std::int64_t i = 0; i < 110 * p.dim; ++i) data.d_o.set(h * p.seq_q * p.dim + i, 100.0f);
  const AttentionResult b = run(p, data);
  for (std::int64_t i = 0; i < a.dk.numel(); ++i) {
    CHECK(a.dk.get(i) == b.dk.get(i));
    CHECK(a.dv.get(i) == b.dv.get(i));
  }
  check_verification(verify_backward(p, data, b, true, 0, 1), p.describe());
}

}  // namespace fa::testing
