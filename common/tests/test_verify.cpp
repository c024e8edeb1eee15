// The tolerance model (fa/verify.hpp) never fails a correct result and still catches wrong ones:
// a correct tiled online softmax passes at scales up to 100, logits up to 200 and D up to 256;
// the same with a missing rescale, or with a causal mask off by one, fails.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "fa/random.hpp"
#include "fa/reference.hpp"
#include "fa/verify.hpp"

namespace {

enum class Bug { none, no_rescale, mask_off_by_one };

// Attention the way the flash stages compute it, one row at a time in float32: keys in tiles of
// 16, the running max m, the running sum l and Õ rescaled by exp(m_old − m_new) at each tile.
void tiled_forward(const fa::Problem& p, const fa::AttentionData& in, fa::AttentionResult& out, Bug bug) {
  const std::int64_t D = p.dim, kTile = 16;
  const float scale = p.softmax_scale();
  for (const fa::RowId& r : fa::all_rows(p)) {
    const std::int64_t row = (r.b * p.heads + r.h) * p.seq_q + r.i;
    std::int64_t visible = p.keys_visible(r.i);
    if (bug == Bug::mask_off_by_one && p.causal) visible = std::min(visible + 1, p.seq_k);
    const float* q = in.q.data() + row * D;
    const float* k = in.k.data() + in.k.head_offset(r.b, r.h);
    const float* v = in.v.data() + in.v.head_offset(r.b, r.h);
    float m = -std::numeric_limits<float>::infinity(), l = 0;
    std::vector<float> o(static_cast<std::size_t>(D), 0.0f);
    for (std::int64_t j0 = 0; j0 < visible; j0 += kTile) {
      const std::int64_t j1 = std::min(j0 + kTile, visible);
      std::vector<float> s;
      for (std::int64_t j = j0; j < j1; ++j) {
        float dot = 0;
        for (std::int64_t d = 0; d < D; ++d) dot += q[d] * k[j * D + d];
        s.push_back(scale * dot);
      }
      const float m_new = std::max(m, *std::max_element(s.begin(), s.end()));
      const float alpha = bug == Bug::no_rescale ? 1.0f : std::exp(m - m_new);
      l *= alpha;
      for (float& x : o) x *= alpha;
      for (std::int64_t j = j0; j < j1; ++j) {
        const float pj = std::exp(s[j - j0] - m_new);
        l += pj;
        for (std::int64_t d = 0; d < D; ++d) o[d] += pj * v[j * D + d];
      }
      m = m_new;
    }
    for (std::int64_t d = 0; d < D; ++d) out.o.values()[row * D + d] = l > 0 ? o[d] / l : 0.0f;
    out.lse.values()[row] = l > 0 ? m + std::log(l) : -std::numeric_limits<float>::infinity();
  }
}

fa::Verification check(const fa::Problem& p, fa::InputKind kind, Bug bug) {
  const fa::AttentionData in = fa::make_inputs(p, 99, kind);
  fa::AttentionResult out(p);
  tiled_forward(p, in, out, bug);
  return fa::verify_forward(p, in, out, fa::VerifyPlan{}, 7);
}

fa::Problem problem(std::int64_t n, std::int64_t d, bool causal, float scale = 0.0f) {
  fa::Problem p;
  p.batch = 1, p.heads = 2, p.seq_q = p.seq_k = n, p.dim = d, p.causal = causal, p.scale = scale;
  return p;
}

}  // namespace

TEST_CASE("a correct kernel passes at large scales, large logits and large D") {
  for (const bool causal : {false, true}) {
    for (const float scale : {0.0f, 2.0f, 8.0f, 30.0f, 100.0f}) {
      const fa::Problem p = problem(256, 64, causal, scale);
      const fa::Verification v = check(p, fa::InputKind::normal, Bug::none);
      CHECK_MESSAGE(v.ok(), p.describe() << " scale " << scale << ": " << v.reports[0].summary());
    }
    for (const std::int64_t d : {16, 128, 256}) {
      const fa::Problem p = problem(200, d, causal);
      CHECK_MESSAGE(check(p, fa::InputKind::normal, Bug::none).ok(), p.describe());
      // Scores of 50 to 200: the allowed error grows with them, as the plain implementation's does.
      const fa::Verification big = check(p, fa::InputKind::large_logits, Bug::none);
      CHECK_MESSAGE(big.ok(), p.describe() << " large logits: " << big.reports[0].summary());
    }
  }
}

TEST_CASE("a missing rescale fails, at ordinary and at large logits") {
  for (const fa::InputKind kind : {fa::InputKind::normal, fa::InputKind::large_logits}) {
    const fa::Problem p = problem(200, 64, false);
    const fa::Verification v = check(p, kind, Bug::no_rescale);
    CHECK_FALSE_MESSAGE(v.ok(), fa::to_string(kind));
    CHECK(v.error_vs_plain > 1000);  // wrong by O(1), not by a rounding error
  }
}

TEST_CASE("a causal mask off by one fails") {
  for (const float scale : {0.0f, 100.0f}) {
    const fa::Problem p = problem(200, 64, true, scale);
    CHECK_FALSE(check(p, fa::InputKind::normal, Bug::mask_off_by_one).ok());
  }
}

TEST_CASE("the allowed error follows the plain implementation's, per dtype") {
  const fa::Tolerance t32 = fa::tolerance_from_plain(1e-6, 2.0, fa::DType::float32);
  const fa::Tolerance t16 = fa::tolerance_from_plain(1e-3, 2.0, fa::DType::float16);
  CHECK(t32.atol == doctest::Approx(fa::kPlainErrorMultiple * 1e-6 + 8 * 0x1.0p-24));
  CHECK(t32.rtol == doctest::Approx(4 * 0x1.0p-24));
  CHECK(t16.atol == doctest::Approx(fa::kPlainErrorMultiple * 1e-3 + 8 * 0x1.0p-11));
  CHECK(t16.rtol == doctest::Approx(4 * 0x1.0p-11));
  // A float32 sum over a million keys: the bound does not go below 2·√Nk·u32·max|ref|, whatever
  // the plain row's luck; where the plain error is larger, it rules as before.
  const fa::Tolerance long_row = fa::tolerance_from_plain(2e-7, 0.5, fa::DType::float32, 1 << 20);
  CHECK(long_row.atol == doctest::Approx(2 * 1024 * 0x1.0p-24 * 0.5 + 4 * 0x1.0p-24 * 0.5));
  CHECK(fa::tolerance_from_plain(1e-3, 0.5, fa::DType::float32, 1 << 20).atol ==
        doctest::Approx(fa::kPlainErrorMultiple * 1e-3 + 4 * 0x1.0p-24 * 0.5));
}

TEST_CASE("the printed verdict says when a row passed above the plain multiple, on the floor") {
  fa::Verification v;
  v.against = "float64 (all rows)";
  fa::CompareReport r;
  r.name = "O", r.count = 10;
  v.reports.push_back(r);
  auto printed = [&](double ratio) {
    v.error_vs_plain = ratio;
    std::ostringstream os;
    v.print(os);
    return os.str();
  };
  CHECK(printed(1.5).find("(allowed: 4)") != std::string::npos);
  CHECK(printed(4.8).find("passed on the floor") != std::string::npos);
  v.reports[0].bad = 1;  // a failing row above the multiple is only "allowed: 4"
  const std::string failed = printed(4.8);
  CHECK(failed.find("FAIL") != std::string::npos);
  CHECK(failed.find("passed on the floor") == std::string::npos);
}

TEST_CASE("a previous stage that does not run the problem leaves the float64 check standing alone") {
  // Stage 07 compares with stage 05, which runs D = 32, 64, 128; files loaded with --load decide D
  // after the stage chose its comparison, so D = 256 reaches it and it refuses (a UsageError).
  const fa::Problem p = problem(100, 256, true);
  const fa::AttentionData in = fa::make_inputs(p, 99, fa::InputKind::normal);
  fa::AttentionResult out(p);
  tiled_forward(p, in, out, Bug::none);
  fa::VerifyPlan plan;
  plan.previous = fa::PreviousStage{"05", [](const fa::Problem& q, const fa::AttentionData&, fa::AttentionResult&) {
                                      throw fa::UsageError("D = " + std::to_string(q.dim) + " is not supported");
                                    }};
  const fa::Verification v = fa::verify_forward(p, in, out, plan, 7);
  CHECK(v.ok());
  CHECK(v.reports.size() == 2);  // O and LSE against float64, nothing from the previous stage
  CHECK(v.against.find("05 does not run this problem: D = 256 is not supported") != std::string::npos);
  // A wrong result still fails there.
  tiled_forward(p, in, out, Bug::no_rescale);
  CHECK_FALSE(fa::verify_forward(p, in, out, plan, 7).ok());
}
