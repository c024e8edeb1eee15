#include <doctest/doctest.h>

#include <cmath>

#include "fa/random.hpp"
#include "fa/reference.hpp"

TEST_CASE("float64 reference: one key gives V, equal scores give the mean of V") {
  fa::Problem p;
  p.seq_q = 3, p.seq_k = 1, p.dim = 4;
  auto in = fa::make_inputs(p, 1);
  auto ref = fa::reference_attention_f64(p, in);
  for (int i = 0; i < 3; ++i)
    for (int d = 0; d < 4; ++d) CHECK(ref.o[i * 4 + d] == doctest::Approx(in.v.at(0, 0, 0, d)));

  p.seq_k = 5;
  in = fa::make_inputs(p, 2);
  for (float& x : in.q.values()) x = 0.0f;  // all scores 0: uniform weights
  ref = fa::reference_attention_f64(p, in);
  for (int d = 0; d < 4; ++d) {
    double mean = 0;
    for (int j = 0; j < 5; ++j) mean += in.v.at(0, 0, j, d) / 5.0;
    CHECK(ref.o[d] == doctest::Approx(mean));
  }
  CHECK(ref.lse[0] == doctest::Approx(std::log(5.0)));
}

TEST_CASE("rows that see no key give 0 and -inf") {
  fa::Problem p;
  p.causal = true;
  p.seq_q = 4, p.seq_k = 2, p.dim = 2;
  const auto in = fa::make_inputs(p, 3);
  const auto ref = fa::reference_attention_f64(p, in);
  CHECK(std::isinf(ref.lse[0]));
  CHECK(ref.lse[0] < 0);
  CHECK(ref.o[0] == 0.0);
  CHECK(std::isfinite(ref.lse[3]));
}

TEST_CASE("the plain implementation: float32 is close to float64, float16 and bfloat16 round coarser") {
  fa::Problem p;
  p.batch = 1, p.heads = 2, p.seq_q = 5, p.seq_k = 300, p.dim = 64, p.causal = true;
  double err[3] = {0, 0, 0};
  int n = 0;
  for (const fa::DType t : {fa::DType::float32, fa::DType::float16, fa::DType::bfloat16}) {
    p.dtype = t;
    const auto in = fa::as_float32(fa::make_inputs(p, 5));
    std::vector<double> ref(64);
    std::vector<float> plain(64);
    for (const fa::RowId& r : fa::all_rows(p)) {
      double lse = 0;
      float plain_lse = 0;
      fa::reference_row_f64(p, in, r, ref.data(), &lse);
      fa::plain_row(p, in, r, plain.data(), &plain_lse);
      for (int d = 0; d < 64; ++d) err[n] = std::max(err[n], std::fabs(plain[d] - ref[d]));
      CHECK(plain_lse == doctest::Approx(lse).epsilon(1e-5));
    }
    ++n;
  }
  CHECK(err[0] < 1e-5);
  CHECK(err[0] > 0);          // float32 arithmetic does round: the tolerance has something to scale
  CHECK(err[1] > 10 * err[0]);  // float16 P and O: u = 2^-11
  CHECK(err[2] > err[1]);       // bfloat16: u = 2^-8
  CHECK(err[2] < 0.05);
}

TEST_CASE("grouped-query heads: query head h reads key/value head h / (Hq / Hkv)") {
  fa::Problem gqa;
  gqa.batch = 1, gqa.heads = 4, gqa.heads_kv = 2, gqa.seq_q = 3, gqa.seq_k = 5, gqa.dim = 4;
  const auto in = fa::make_inputs(gqa, 6);
  CHECK(in.k.shape().h == 2);
  // The same K/V heads repeated for each query head give plain multi-head attention.
  fa::Problem mha = gqa;
  mha.heads_kv = 0;
  fa::AttentionData rep{in.q, fa::HostTensor(fa::kv_shape(mha)), fa::HostTensor(fa::kv_shape(mha)), {}};
  for (std::int64_t h = 0; h < 4; ++h)
    for (std::int64_t j = 0; j < 5; ++j)
      for (std::int64_t d = 0; d < 4; ++d) {
        rep.k.at(0, h, j, d) = in.k.at(0, h / 2, j, d);
        rep.v.at(0, h, j, d) = in.v.at(0, h / 2, j, d);
      }
  const auto a = fa::reference_attention_f64(gqa, in), b = fa::reference_attention_f64(mha, rep);
  CHECK(a.o == b.o);
  CHECK(a.lse == b.lse);
}

TEST_CASE("sampled rows include the edges") {
  fa::Problem p;
  p.batch = 2, p.heads = 3, p.seq_q = 100;
  const auto rows = fa::sample_rows(p, 5, 9);
  bool first = false, last = false;
  for (const auto& r : rows) {
    first |= (r.b == 0 && r.h == 0 && r.i == 0);
    last |= (r.b == 1 && r.h == 2 && r.i == 99);
  }
  CHECK(first);
  CHECK(last);
}
