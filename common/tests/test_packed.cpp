// A packed variable-length batch (problem.hpp, packed.hpp): its shapes, offsets, FLOPs and
// checks; the split into sequences and back; and its float64 reference, which must equal each
// sequence's attention computed alone (causal within the sequence, no key of another sequence).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include "fa/npy.hpp"
#include "fa/packed.hpp"
#include "fa/random.hpp"
#include "fa/reference.hpp"
#include "fa/stage.hpp"
#include "fa/verify.hpp"

namespace {

fa::Problem packed(std::vector<std::int64_t> lens, bool causal, std::int64_t heads = 3, std::int64_t heads_kv = 0) {
  fa::Problem base;
  base.heads = heads;
  base.heads_kv = heads_kv;
  base.dim = 16;
  base.causal = causal;
  return fa::packed_problem(base, std::move(lens));
}

}  // namespace

TEST_CASE("a packed problem: B sequences, Nq = Nk = the longest, tensors [1, H, total, D], offsets") {
  const fa::Problem p = packed({5, 1, 12, 7}, false, 4, 2);
  CHECK(p.packed());
  CHECK(p.batch == 4);
  CHECK(p.seq_q == 12);
  CHECK(p.seq_k == 12);
  CHECK(p.total_tokens() == 25);
  CHECK(p.cu_seqlens() == std::vector<std::int64_t>{0, 5, 6, 18, 25});
  CHECK(fa::q_shape(p) == fa::Shape4{1, 4, 25, 16});
  CHECK(fa::kv_shape(p) == fa::Shape4{1, 2, 25, 16});
  CHECK(fa::lse_shape(p) == fa::Shape4{1, 4, 25, 1});
  CHECK(p.q_elements() == 4 * 25 * 16);
  CHECK(p.kv_elements() == 2 * 25 * 16);
  CHECK(p.lse_elements() == 4 * 25);
  CHECK(p.describe().find("packed N=5,1,12,7") != std::string::npos);
  p.validate();
}

TEST_CASE("a packed problem's FLOPs are its sequences' FLOPs, causal halved per sequence") {
  for (const bool causal : {false, true}) {
    const fa::Problem p = packed({5, 1, 12, 7}, causal);
    double sum = 0.0;
    for (std::int64_t s = 0; s < p.batch; ++s) sum += fa::sequence_problem(p, s).flops_forward();
    CHECK(p.flops_forward() == doctest::Approx(sum));
    const double pairs = causal ? 0.5 * (25 + 1 + 144 + 49) : (25 + 1 + 144 + 49);
    CHECK(p.flops_forward() == doctest::Approx(4.0 * 3 * 16 * pairs));
  }
}

TEST_CASE("bad packed batches are refused with one line") {
  fa::Problem base;
  CHECK_THROWS_AS(fa::packed_problem(base, {}), fa::UsageError);
  CHECK_THROWS_AS(fa::packed_problem(base, {3, 0}), fa::UsageError);
  fa::Problem p = packed({3, 5}, false);
  p.seq_q = 4;  // not the longest: a caller's bug, refused
  CHECK_THROWS_AS(p.validate(), fa::UsageError);
  fa::Problem q = packed({3, 5}, false);
  CHECK_THROWS_WITH_AS(q.require(fa::Supports{}), doctest::Contains("variable-length"), fa::UsageError);
  fa::Supports ok;
  ok.variable_lengths = true;
  q.require(ok);
}

TEST_CASE("sequences out and back: the rows of every head, in every dtype") {
  for (const fa::DType t : {fa::DType::float32, fa::DType::bfloat16}) {
    fa::Problem p = packed({4, 9, 2}, true, 2);
    p.dtype = t;
    const fa::AttentionData in = fa::make_inputs(p, 77);
    fa::AttentionResult out(p);
    const std::vector<std::int64_t> cu = p.cu_seqlens();
    for (std::int64_t s = 0; s < p.batch; ++s) {
      const fa::Problem one = fa::sequence_problem(p, s);
      CHECK_FALSE(one.packed());
      CHECK(one.batch == 1);
      CHECK(one.seq_q == p.seq_lens[static_cast<std::size_t>(s)]);
      const fa::AttentionData part = fa::sequence_inputs(p, in, s);
      for (std::int64_t h = 0; h < p.heads; ++h)
        for (std::int64_t i = 0; i < one.seq_q; ++i)
          for (std::int64_t c = 0; c < p.dim; ++c) {
            const std::int64_t packed_at = (h * p.total_tokens() + cu[s] + i) * p.dim + c;
            const std::int64_t alone_at = (h * one.seq_q + i) * p.dim + c;
            CHECK(part.q.get(alone_at) == in.q.get(packed_at));
            CHECK(part.k.get(alone_at) == in.k.get(packed_at));
          }
      // A result placed back lands on the same rows, and reads back unchanged.
      fa::AttentionResult r(one);
      for (std::int64_t e = 0; e < r.o.numel(); ++e) r.o.set(e, static_cast<float>(s * 1000 + e));
      for (std::int64_t e = 0; e < r.lse.numel(); ++e) r.lse.set(e, static_cast<float>(-s - e));
      fa::place_sequence(p, s, r, out);
      const fa::AttentionResult back = fa::sequence_result(p, out, s);
      CHECK(back.o.to_float() == r.o.to_float());
      CHECK(back.lse.to_float() == r.lse.to_float());
    }
  }
}

TEST_CASE("copy_rows: the same rows of every (batch, head), long runs split across threads, bad ranges refused") {
  // B = 2, H = 3 and 40000 rows of width 2: 3·2·29999 rows copied, more than one thread's share, so
  // ranges start and end inside heads.
  fa::HostTensor from(fa::Shape4{2, 3, 40000, 2});
  for (std::int64_t e = 0; e < from.numel(); ++e) from.set(e, static_cast<float>(e % 1000003));
  fa::HostTensor to(fa::Shape4{2, 3, 30001, 2}, fa::DType::float32, -1.0f);
  fa::copy_rows(from, 1001, to, 1, 29999);
  bool same = true;
  for (std::int64_t head = 0; head < 6; ++head)
    for (std::int64_t i = 0; i < 29999; ++i)
      for (std::int64_t j = 0; j < 2; ++j)
        same = same && to.get((head * 30001 + 1 + i) * 2 + j) == from.get((head * 40000 + 1001 + i) * 2 + j);
  CHECK(same);
  CHECK(to.get(0) == -1.0f);                  // row 0 of the first head: untouched
  CHECK(to.get((5 * 30001) * 2 + 1) == -1.0f);  // and of the last
  CHECK_THROWS_AS(fa::copy_rows(from, 39000, to, 0, 2000), std::logic_error);   // past `from`
  CHECK_THROWS_AS(fa::copy_rows(from, 0, to, 29000, 2000), std::logic_error);   // past `to`
  const fa::HostTensor other_heads(fa::Shape4{2, 2, 40000, 2});
  CHECK_THROWS_AS(fa::copy_rows(other_heads, 0, to, 0, 1), std::logic_error);
}

TEST_CASE("the packed reference is each sequence's attention alone: no key of another sequence") {
  for (const bool causal : {false, true}) {
    const fa::Problem p = packed({6, 1, 13, 4}, causal, 4, 2);
    const fa::AttentionData in = fa::make_inputs(p, causal ? 5 : 6);
    const fa::ReferenceF64 ref = fa::reference_attention_f64(p, in);
    REQUIRE(ref.o.size() == static_cast<std::size_t>(p.q_elements()));
    REQUIRE(ref.lse.size() == static_cast<std::size_t>(p.lse_elements()));
    const std::vector<std::int64_t> cu = p.cu_seqlens();
    const double scale = p.softmax_scale();
    // From the definition, here: row i of sequence s, query head h, against keys cu[s] .. of K/V
    // head h / 2, the causal ones j <= i within the sequence.
    for (std::int64_t s = 0; s < p.batch; ++s)
      for (std::int64_t h = 0; h < p.heads; ++h)
        for (std::int64_t i = 0; i < p.seq_lens[static_cast<std::size_t>(s)]; ++i) {
          const std::int64_t len = p.seq_lens[static_cast<std::size_t>(s)], kv = h / 2;
          const std::int64_t seen = causal ? i + 1 : len;
          std::vector<double> scores(static_cast<std::size_t>(seen));
          double m = -INFINITY;
          for (std::int64_t j = 0; j < seen; ++j) {
            double dot = 0.0;
            for (std::int64_t c = 0; c < p.dim; ++c)
              dot += static_cast<double>(in.q.get((h * p.total_tokens() + cu[s] + i) * p.dim + c)) *
                     in.k.get((kv * p.total_tokens() + cu[s] + j) * p.dim + c);
            scores[static_cast<std::size_t>(j)] = scale * dot;
            m = std::max(m, scale * dot);
          }
          double l = 0.0;
          for (double x : scores) l += std::exp(x - m);
          const std::size_t row = static_cast<std::size_t>(h * p.total_tokens() + cu[s] + i);
          CHECK(ref.lse[row] == doctest::Approx(m + std::log(l)).epsilon(1e-12));
          for (std::int64_t c = 0; c < p.dim; c += 5) {
            double o = 0.0;
            for (std::int64_t j = 0; j < seen; ++j)
              o += std::exp(scores[static_cast<std::size_t>(j)] - m - std::log(l)) *
                   in.v.get((kv * p.total_tokens() + cu[s] + j) * p.dim + c);
            CHECK(ref.o[row * static_cast<std::size_t>(p.dim) + static_cast<std::size_t>(c)] ==
                  doctest::Approx(o).epsilon(1e-12));
          }
        }
  }
}

TEST_CASE("verifying a packed result: sequence by sequence, a bad element named with its sequence") {
  fa::Problem p = packed({6, 1, 13, 4}, true, 4, 2);
  p.dtype = fa::DType::bfloat16;
  const fa::AttentionData in = fa::make_inputs(p, 91);
  fa::AttentionResult out(p);
  fa::reference_forward_f64(p, in, out);  // the float64 result, rounded to bf16: within tolerance
  fa::VerifyPlan plan;
  const fa::Verification v = fa::verify_forward(p, in, out, plan, 0);
  CHECK(v.ok());
  CHECK(v.how.find("each of the 4 sequences") != std::string::npos);
  REQUIRE(v.reports.size() == 2);  // O and LSE, merged over the sequences
  CHECK(v.reports[0].count == p.q_elements());
  CHECK(v.reports[1].count == p.lse_elements());
  // One wrong element in sequence 2 (head 1, its row 3): caught, and named with its sequence.
  const std::vector<std::int64_t> cu = p.cu_seqlens();
  out.o.set((1 * p.total_tokens() + cu[2] + 3) * p.dim + 5, 7.0f);
  const fa::Verification bad = fa::verify_forward(p, in, out, plan, 0);
  CHECK_FALSE(bad.ok());
  CHECK(bad.reports[0].bad == 1);
  CHECK_MESSAGE(bad.reports[0].first_bad_at.find("sequence 2") != std::string::npos, bad.reports[0].first_bad_at);
}

TEST_CASE("--load of a packed batch: [1, H, total, D] files and cu_seqlens.txt; bad offsets refused") {
  const auto dir = std::filesystem::temp_directory_path() / "fa_packed_load";
  std::filesystem::create_directories(dir);
  const std::vector<float> q(1 * 4 * 9 * 8, 0.25f), kv(1 * 2 * 9 * 8, 0.5f);
  fa::write_npy((dir / "q.npy").string(), {1, 4, 9, 8}, q.data());
  fa::write_npy((dir / "k.npy").string(), {1, 2, 9, 8}, kv.data());
  fa::write_npy((dir / "v.npy").string(), {1, 2, 9, 8}, kv.data());
  auto offsets = [&](const char* text) { std::ofstream(dir / "cu_seqlens.txt") << text; };
  offsets("0, 2, 7\n9\n");
  fa::Problem p;
  const fa::AttentionData in = fa::load_inputs(dir.string(), p, fa::Pass::forward, 1);
  CHECK(p.packed());
  CHECK(p.seq_lens == std::vector<std::int64_t>{2, 5, 2});
  CHECK(p.batch == 3);
  CHECK(p.seq_q == 5);
  CHECK(p.heads == 4);
  CHECK(p.kv_heads() == 2);
  CHECK(in.q.shape() == fa::Shape4{1, 4, 9, 8});
  for (const char* bad : {"0 2 8", "1 2 9", "0 5 5 9", "0 2 x 9", "0"}) {
    offsets(bad);
    fa::Problem b;
    CHECK_THROWS_AS(fa::load_inputs(dir.string(), b, fa::Pass::forward, 1), fa::UsageError);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("packed inputs whose scaled scores overflow float32 are refused, sequence by sequence") {
  fa::Problem p = packed({3, 4}, true);
  p.scale = 1e38f;
  CHECK_THROWS_WITH_AS(fa::make_case_inputs(p, fa::Pass::forward, 1, fa::InputKind::normal),
                       doctest::Contains("overflows float32"), fa::UsageError);
  p.scale = 0.0f;
  CHECK_NOTHROW(fa::make_case_inputs(p, fa::Pass::forward, 1, fa::InputKind::normal));
}
