// Stage 13's ring bookkeeping, on the CPU: the split of the sequence (every token held once; zigzag's
// two chunks), the schedule (every GPU sees every K/V block once in P steps), the three kinds of
// block and their work (zigzag balanced, contiguous not: the counted imbalance), the GPU code's
// layout of chunks and blocks (offsets, sizes, rows taken and put back), and the ring modelled in
// float64 — forward and backward, 1 to 5 GPUs, both splits, causal and not, sequences
// that are no multiple of the chunks and shorter than them, large logits — against the float64
// attention and gradients of the whole sequence, to rounding.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "13_ring_attention/ring_layout.hpp"
#include "13_ring_attention/ring_model.hpp"
#include "13_ring_attention/ring_schedule.hpp"
#include "fa/backward.hpp"
#include "fa/random.hpp"
#include "fa/reference.hpp"
#include "fa/testing.hpp"

namespace {

using fa::step13::Block;
using fa::step13::Chunk;
using fa::step13::Split;

constexpr Split kSplits[] = {Split::contiguous, Split::zigzag};

using fa::step13::max_relative_error;

}  // namespace

TEST_CASE("the split holds every token exactly once; zigzag takes one chunk from each end") {
  for (const std::int64_t n : {1, 5, 8, 100, 4099})
    for (int gpus = 1; gpus <= 5; ++gpus)
      for (const Split split : kSplits) {
        INFO("N = " << n << ", P = " << gpus << ", " << fa::step13::to_string(split));
        std::vector<int> held(n, 0);
        for (int r = 0; r < gpus; ++r) {
          const auto chunks = fa::step13::rank_chunks(n, gpus, split, r);
          CHECK(chunks.size() == (split == Split::zigzag ? 2u : 1u));
          for (const Chunk& c : chunks)
            for (std::int64_t t = c.begin; t < c.end(); ++t) ++held[t];
        }
        CHECK(std::all_of(held.begin(), held.end(), [](int h) { return h == 1; }));
      }
  const auto r0 = fa::step13::rank_chunks(16, 2, Split::zigzag, 0), r1 = fa::step13::rank_chunks(16, 2, Split::zigzag, 1);
  CHECK(r0 == std::vector<Chunk>{{0, 4}, {12, 4}});
  CHECK(r1 == std::vector<Chunk>{{4, 4}, {8, 4}});
  CHECK(fa::step13::cut(10, 4) == std::vector<Chunk>{{0, 3}, {3, 3}, {6, 2}, {8, 2}});
}

TEST_CASE("in P steps every GPU holds every GPU's K/V block once, its own first") {
  for (int gpus = 1; gpus <= 6; ++gpus)
    for (int r = 0; r < gpus; ++r) {
      std::vector<int> seen(gpus, 0);
      for (int step = 0; step < gpus; ++step) ++seen[fa::step13::block_owner(r, step, gpus)];
      CHECK(fa::step13::block_owner(r, 0, gpus) == r);
      CHECK(fa::step13::block_owner(r, 1, gpus) == (r + gpus - 1) % gpus);  // one hop: from the previous GPU
      CHECK(std::all_of(seen.begin(), seen.end(), [](int s) { return s == 1; }));
    }
}

TEST_CASE("blocks: full, diagonal (the same chunk) or skipped; their visible pairs") {
  using fa::step13::classify;
  CHECK(classify({8, 4}, {0, 4}, true) == Block::full);
  CHECK(classify({8, 4}, {4, 4}, true) == Block::full);  // the last key (7) precedes the first query (8)
  CHECK(classify({8, 4}, {8, 4}, true) == Block::diagonal);
  CHECK(classify({8, 4}, {12, 4}, true) == Block::skipped);
  CHECK(classify({8, 4}, {12, 4}, false) == Block::full);
  CHECK(classify({8, 0}, {0, 4}, false) == Block::skipped);  // an empty chunk (N < chunks)
  CHECK(classify({8, 1}, {8, 1}, true) == Block::full);  // one token against itself: nothing is masked
  CHECK_THROWS_AS(classify({8, 4}, {10, 4}, true), std::logic_error);
  CHECK(fa::step13::visible_pairs({8, 4}, {8, 4}, true) == 10);
  CHECK(fa::step13::visible_pairs({8, 4}, {0, 3}, true) == 12);
  // All GPUs over all steps see exactly the pairs of the whole sequence.
  for (const std::int64_t n : {1, 7, 64, 1001})
    for (int gpus = 1; gpus <= 5; ++gpus)
      for (const Split split : kSplits) {
        CHECK(fa::step13::balance(n, gpus, split, true).total_pairs == n * (n + 1) / 2);
        CHECK(fa::step13::balance(n, gpus, split, false).total_pairs == n * n);
      }
}

TEST_CASE("causal: zigzag gives every GPU the same work at every step, contiguous does not") {
  for (int gpus = 1; gpus <= 8; ++gpus) {
    const std::int64_t n = 2 * gpus * 512;
    INFO("P = " << gpus);
    CHECK(fa::step13::balance(n, gpus, Split::zigzag, true).imbalance == doctest::Approx(1.0).epsilon(1e-12));
    CHECK(fa::step13::balance(n, gpus, Split::zigzag, false).imbalance == doctest::Approx(1.0).epsilon(1e-12));
    CHECK(fa::step13::balance(n, gpus, Split::contiguous, false).imbalance == doctest::Approx(1.0).epsilon(1e-12));
    // Contiguous causal, chunks of c tokens: step 0 is the diagonal everywhere, c(c+1)/2; every
    // later step has one GPU with a full c² block. Over the ideal N(N+1)/2/P: about 2 − 1/P.
    const double c = static_cast<double>(n / gpus);
    const double expect = (c * (c + 1) / 2 + (gpus - 1) * c * c) * gpus / (n * (n + 1.0) / 2);
    CHECK(fa::step13::balance(n, gpus, Split::contiguous, true).imbalance == doctest::Approx(expect).epsilon(1e-12));
  }
  CHECK(fa::step13::balance(4096, 2, Split::contiguous, true).imbalance == doctest::Approx(1.5).epsilon(1e-3));
  // Uneven chunks still balance to within one token's row.
  CHECK(fa::step13::balance(1001, 4, Split::zigzag, true).imbalance < 1.01);
}

TEST_CASE("the ring modelled in float64 equals attention and its gradients on the whole sequence") {
  std::uint64_t seed = 1100;
  for (const bool causal : {false, true})
    for (const std::int64_t n : {1, 3, 37, 96})
      for (int gpus = 1; gpus <= 5; ++gpus)
        for (const Split split : kSplits) {
          const fa::Problem p = fa::testing::problem(n, n, 16, causal, 1, 2);
          INFO("N = " << n << ", P = " << gpus << ", " << fa::step13::to_string(split) << (causal ? ", causal" : ""));
          const fa::AttentionData in = fa::make_inputs(p, ++seed);
          const fa::HostTensor d_o = fa::make_output_grad(p, ++seed);
          const fa::step13::ModelErrors e = fa::step13::model_errors(p, in, d_o, gpus, split);
          CHECK(e.o < 1e-12);
          CHECK(e.lse < 1e-12);
          CHECK(e.dq < 1e-11);
          CHECK(e.dk < 1e-11);
          CHECK(e.dv < 1e-11);
        }
}

TEST_CASE("large logits (scores 50 to 200): the running merge neither overflows nor loses a block") {
  fa::Problem p = fa::testing::problem(200, 200, 32, true, 1, 1);
  const fa::AttentionData in = fa::make_inputs(p, 1177, fa::InputKind::large_logits);
  const fa::ReferenceF64 want = fa::reference_attention_f64(p, in);
  for (const Split split : kSplits) {
    const auto ring = fa::step13::ring_forward_model(p, in, 4, split);
    CHECK(max_relative_error(ring.o, want.o) < 1e-12);
    CHECK(max_relative_error(ring.lse, want.lse) < 1e-12);
  }
}

TEST_CASE("problems the ring does not run are refused with one line") {
  const fa::Problem ok = fa::testing::problem(8, 8, 16, true, 1, 2);
  const fa::AttentionData in = fa::make_inputs(ok, 1);
  CHECK_THROWS_AS(fa::step13::ring_forward_model(ok, in, 0, Split::zigzag), fa::UsageError);
  fa::Problem cross = fa::testing::problem(8, 16, 16, true, 1, 2);
  CHECK_THROWS_WITH_AS(fa::step13::require_ring_problem(cross, 2), doctest::Contains("Nq must equal Nk"), fa::UsageError);
  fa::Problem grouped = ok;
  grouped.heads_kv = 1;
  CHECK_THROWS_AS(fa::step13::require_ring_problem(grouped, 2), fa::UsageError);
  CHECK_THROWS_AS(fa::step13::parse_split("stripes"), fa::UsageError);
  CHECK(fa::step13::parse_split("zigzag") == Split::zigzag);
}

TEST_CASE("the GPU code's layout: a block's K and V parts tile its buffer; rows taken and put back") {
  fa::Problem p = fa::testing::problem(1001, 1001, 64, true, 2, 3);
  p.dtype = fa::DType::bfloat16;
  for (const Split split : kSplits)
    for (int gpus = 1; gpus <= 4; ++gpus) {
      INFO("P = " << gpus << ", " << fa::step13::to_string(split));
      std::int64_t all_tokens = 0;
      for (int r = 0; r < gpus; ++r) {
        const auto chunks = fa::step13::rank_chunks(p.seq_k, gpus, split, r);
        for (const std::size_t element : {std::size_t{2}, std::size_t{4}}) {
          const fa::step13::BlockLayout l = fa::step13::block_layout(p, chunks, element);
          std::size_t at = 0;
          for (std::size_t c = 0; c < chunks.size(); ++c) {  // K then V of each chunk, back to back
            const std::size_t part = static_cast<std::size_t>(p.batch * p.heads * chunks[c].length * p.dim) * element;
            CHECK(l.k_at[c] == at);
            CHECK(l.v_at[c] == at + part);
            CHECK(l.k_at[c] % 16 == 0);  // the kernels move 16-byte pieces (D = 64: every offset a multiple of 128 bytes)
            at += 2 * part;
          }
          CHECK(l.bytes == at);
        }
        for (const Chunk& c : chunks) all_tokens += c.length;
      }
      CHECK(all_tokens == p.seq_k);
    }
  // Taking every rank's rows and putting them back rebuilds the tensor exactly (fp16 and float32, two heads' worth).
  for (const fa::DType t : {fa::DType::float16, fa::DType::float32}) {
    fa::HostTensor drawn(fa::Shape4{2, 3, 77, 8});
    fa::Rng rng(1500);
    fa::fill_normal(drawn, rng, 0.5, 1.0);
    const fa::HostTensor whole = drawn.converted(t);
    fa::HostTensor rebuilt(whole.shape(), t, -1.0f);
    for (int r = 0; r < 3; ++r)
      for (const Chunk& c : fa::step13::rank_chunks(77, 3, Split::zigzag, r)) {
        const fa::HostTensor part = fa::step13::take_rows(whole, c);
        CHECK(part.shape() == fa::Shape4{2, 3, c.length, 8});
        CHECK(part.get(0) == whole.get(c.begin * 8));                                   // head 0, its first row
        CHECK(part.get((1 * 3 + 2) * c.length * 8) == whole.get(((1 * 3 + 2) * 77 + c.begin) * 8));  // batch 1, head 2
        fa::step13::place_rows(rebuilt, part, c);
      }
    CHECK(std::memcmp(rebuilt.raw(), whole.raw(), whole.bytes()) == 0);
    CHECK_THROWS_AS(fa::step13::take_rows(whole, Chunk{70, 8}), std::logic_error);
  }
}
