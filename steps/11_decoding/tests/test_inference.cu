// Stage 11's split-KV decoding against float64 with the tolerance 16-bit rounding allows
// (docs/tolerance.md): Nq = 1 to 16 (and longer), caches that are no multiple of the key tiles or of
// the splits, grouped heads (G = 1, 3, 4, 8; multi-query), causal with rows that see no key,
// splits forced to 1, to more than the tiles, and chosen; fp16 and bf16; every head dim; large
// logits; batches of caches of different lengths; the partials' memory measured; against stage 07
// on the same problem (K/V heads repeated). The split heuristic on a table of shapes. The four
// merges of the splits, the last-block merge also across launches, the cluster merge's refusals;
// the default merge (the fastest on this GPU). A paged cache against the contiguous one.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fa/cuda/ptx/grid_dependency.cuh"
#include "11_decoding/inference.cuh"
#include "11_decoding/lab/read_cache.cuh"
#include "fa/compare.hpp"
#include "fa/cuda/check.cuh"
#include "fa/cuda/device.cuh"
#include "fa/cuda/device_buffer.cuh"
#include "fa/cuda/stage_arch.cuh"
#include "fa/random.hpp"
#include "fa/testing.hpp"

namespace {

constexpr fa::DType kDtypes[] = {fa::DType::bfloat16, fa::DType::float16};

fa::Problem decode_problem(std::int64_t nq, std::int64_t nk, std::int64_t d, bool causal, std::int64_t heads,
                           std::int64_t heads_kv, fa::DType t, std::int64_t batch = 2) {
  fa::Problem p = fa::testing::problem(nq, nk, d, causal, batch, heads);
  p.heads_kv = heads_kv;
  p.dtype = t;
  return p;
}

using fa::step11::Merge;

struct Heads {  // query heads on K/V heads: Hq, Hkv
  std::int64_t q, kv;
};

fa::DeviceForward with_splits(int splits, Merge merge = Merge::warp_per_row) {
  return [splits, merge](const fa::Problem& p, const fa::AttentionInputs& in, const fa::AttentionOutputs& out,
                         fa::DeviceContext& ctx) {
    fa::step11::decode_forward(p, in, out, ctx, fa::step11::DecodeOptions{.splits = splits, .merge = merge});
  };
}

const char* merged_by(Merge merge) {
  switch (merge) {
    case Merge::warp_per_row: return "merged by a warp per row";
    case Merge::block_per_row: return "merged by a block per row";
    case Merge::cluster: return "merged by each row tile's cluster";
    case Merge::fastest: return "merged the fastest way on this GPU";
    default: return "merged by each row tile's last block";
  }
}

// One case at the given splits (0: chosen): against float64 on every row, rows without keys
// exactly 0 and −inf, and the memory beyond the tensors exactly the partial results (and the last
// block's counters, one per row tile; nothing for the cluster merge, whose partials stay on chip).
void check_case(const fa::Problem& p, std::uint64_t seed, int splits, fa::InputKind kind = fa::InputKind::normal,
                Merge merge = Merge::warp_per_row) {
  const fa::step11::DecodePlan plan = fa::step11::plan_decode(p, splits, merge);
  INFO(p.describe() << " " << fa::to_string(p.dtype) << ", " << plan.splits << " splits, " << merged_by(merge));
  const fa::AttentionData in = fa::make_inputs(p, seed, kind);
  const fa::GpuRun r = fa::run_once(p, in, with_splits(splits, merge));
  const Merge used = merge == Merge::fastest ? fa::step11::fastest_merge() : merge;
  const std::int64_t partials =
      plan.splits > 1 && used != Merge::cluster ? plan.splits * p.batch * p.heads * p.seq_q * (p.dim + 1) * 4 : 0;
  const std::int64_t counters = plan.splits > 1 && used == Merge::last_block ? plan.blocks * 4 : 0;
  CHECK(r.extra_bytes == partials + counters);
  fa::testing::check_verified(p, in, r.out, "10 split_kv");
  if (p.causal) fa::testing::check_empty_rows(p, r.out);
}

void skip_without_gpu() { fa::exit_skipped_below(fa::kStageMinComputeCapability); }

// What the kernel before a decoding step writes in a model: copies of 16-byte chunks, `count[c]`
// from `from[c]` to `to[c]` (the step's Q, and each K/V head's newest keys and values).
struct LateWrites {
  static constexpr int kMax = 8;
  const int4* from[kMax];
  int4* to[kMax];
  long long count[kMax];
  int copies = 0;
};

// That kernel: it lets the next kernel start at once (as a kernel written for programmatic
// dependent launch does), then, after `ns` nanoseconds, makes its writes.
__global__ void late_writer(const LateWrites w, long long ns) {
  fa::ptx::allow_next_grid();
  long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  while (now - start < ns);
  for (int c = 0; c < w.copies; ++c)
    for (long long i = threadIdx.x; i < w.count[c]; i += blockDim.x) w.to[c][i] = w.from[c][i];
}

}  // namespace

TEST_CASE("choose_splits: one split when the blocks fill half the GPU, else the fewest splits that do") {
  using fa::step11::choose_splits;
  // 132 blocks at once, 66 streaming. One sequence, 8 K/V heads: 9 splits make 72 blocks.
  CHECK(choose_splits(8, 256, 132, 8) == 9);
  CHECK(choose_splits(8, 4096, 132, 8) == 9);   // a longer cache: the same blocks, longer chunks
  CHECK(choose_splits(128, 256, 132, 8) == 1);  // batch 16 × 8 heads: enough blocks without splitting
  CHECK(choose_splits(66, 256, 132, 8) == 1);   // exactly half
  CHECK(choose_splits(65, 256, 132, 8) == 2);
  CHECK(choose_splits(8, 40, 132, 8) == 5);     // a short cache: at most 40 / 8 = 5 chunks
  CHECK(choose_splits(8, 7, 132, 8) == 1);      // shorter than one chunk
  CHECK(choose_splits(1, 100000, 132, 8) == 66);  // one head: 66 chunks
  CHECK(choose_splits(1, 100000, 1000, 8, 128) == 128);  // capped
  CHECK(choose_splits(0, 10, 132, 8) == 1);
  for (std::int64_t blocks = 1; blocks < 300; blocks += 7)
    for (std::int64_t tiles : {1, 9, 64, 1000}) {
      const int s = choose_splits(blocks, tiles, 132, 8);
      CHECK(s >= 1);
      CHECK(s <= 128);
      CHECK((s == 1 || s * 8 <= tiles));
      CHECK((s == 1 || blocks * (s - 1) < 66));  // no more splits than half the GPU needs
    }
}

TEST_CASE("decoding against float64: Nq = 1 to 16, grouped heads, caches off every tile, fp16 and bf16") {
  skip_without_gpu();
  const Heads heads[] = {{8, 2}, {4, 4}, {6, 1}, {24, 3}};
  std::uint64_t seed = 10000;
  for (const fa::DType t : kDtypes)
    for (const std::int64_t d : {64, 128})
      for (const Heads h : heads)
        for (const std::int64_t nq : {1, 4, 16})
          for (const std::int64_t nk : {1, 77, 1000, 4097})
            for (const bool causal : {false, true}) {
              const fa::Problem p = decode_problem(nq, nk, d, causal, h.q, h.kv, t);
              for (const int splits : {0, 1, 3}) check_case(p, ++seed, splits);
            }
}

TEST_CASE("more splits than key tiles, rows past 16 per K/V head, Nq > Nk, and the other head dims") {
  skip_without_gpu();
  std::uint64_t seed = 10500;
  for (const fa::DType t : kDtypes) {
    // 128 chunks of a 300-key cache: most chunks empty (LSE −inf, weight 0).
    check_case(decode_problem(1, 300, 128, false, 8, 2, t), ++seed, 128);
    check_case(decode_problem(3, 300, 64, true, 8, 1, t), ++seed, 128);
    // G·Nq = 8 · 5 = 40 rows: three 16-row tiles, the last one partly padding; causal Nq > Nk.
    check_case(decode_problem(5, 3, 64, true, 8, 1, t), ++seed, 0);
    check_case(decode_problem(40, 33, 128, true, 8, 1, t), ++seed, 2);
    // Prefill-like: Nq = Nk = 200 (13 row tiles per head), causal, MHA.
    check_case(decode_problem(200, 200, 64, true, 2, 2, t), ++seed, 0);
    for (const std::int64_t d : {32, 96, 256})
      for (const bool causal : {false, true}) {
        check_case(decode_problem(2, 1500, d, causal, 4, 2, t), ++seed, 0);
        check_case(decode_problem(2, 1500, d, causal, 4, 2, t), ++seed, 5);
      }
  }
  check_case(decode_problem(4, 3000, 128, true, 8, 2, fa::DType::bfloat16), ++seed, 0, fa::InputKind::large_logits);
  check_case(decode_problem(1, 3000, 64, false, 8, 8, fa::DType::float16), ++seed, 7, fa::InputKind::large_logits);
}

// Thread-block clusters (Merge::cluster) need compute capability 9.0.
bool clusters_here() { return fa::current_compute_capability() >= 90; }

// The most blocks a cluster of p's decode kernel may have on this GPU (16 on an H100; beyond 8 the
// driver decides).
int largest_cluster(const fa::Problem& p) {
  for (int s = fa::step11::kMaxClusterSplits; s >= 2; --s)
    if (fa::step11::cluster_capacity(p, s) > 0) return s;
  return 1;
}

TEST_CASE("the other merges (a block per row; the last block; the cluster): 2 to 128 splits, empty splits, rows without keys") {
  skip_without_gpu();
  for (const Merge merge : {Merge::block_per_row, Merge::last_block, Merge::cluster}) {
    if (merge == Merge::cluster && !clusters_here()) continue;
    std::uint64_t seed = 10700;
    for (const fa::DType t : kDtypes)
      for (const std::int64_t d : {32, 64, 128, 256})
        for (const bool causal : {false, true}) {
          // A cluster holds at most the largest cluster this GPU runs (16 blocks on an H100); 0: chosen.
          const int most = merge == Merge::cluster ? largest_cluster(decode_problem(1, 4097, d, causal, 8, 2, t)) : 128;
          for (const int splits : {0, 2, 5, std::min(9, most), most}) {
            check_case(decode_problem(1, 4097, d, causal, 8, 2, t), ++seed, splits, fa::InputKind::normal, merge);
            check_case(decode_problem(3, 300, d, causal, 8, 1, t), ++seed, splits, fa::InputKind::normal, merge);
          }
        }
    check_case(decode_problem(5, 3, 64, true, 8, 1, fa::DType::bfloat16), ++seed, 3, fa::InputKind::normal, merge);  // Nq > Nk
    // 40 rows per K/V head: three row tiles, each with its own counter; batch 2.
    check_case(decode_problem(5, 2000, 128, true, 8, 1, fa::DType::bfloat16), ++seed, 6, fa::InputKind::normal, merge);
    check_case(decode_problem(4, 3000, 128, true, 8, 2, fa::DType::bfloat16), ++seed, 7, fa::InputKind::large_logits, merge);
  }
}

TEST_CASE("the cluster merge: the chosen splits a portable cluster; more than this GPU's largest cluster, or a GPU without clusters, refused in one line") {
  skip_without_gpu();
  const fa::Problem p = decode_problem(1, 8192, 128, false, 32, 8, fa::DType::bfloat16, 1);
  const fa::AttentionData in = fa::make_inputs(p, 10950, fa::InputKind::normal);
  if (clusters_here()) {
    // The rule's splits (9 on an H100), capped at a portable cluster; batch 16: the rule's one split.
    const int rule = fa::step11::plan_decode(p, 0, Merge::block_per_row).splits;
    CHECK(rule > 1);
    CHECK(fa::step11::plan_decode(p, 0, Merge::cluster).splits == std::min(rule, fa::step11::kPortableClusterSplits));
    CHECK(fa::step11::cluster_capacity(p, fa::step11::kPortableClusterSplits) > 0);
    CHECK(fa::step11::plan_decode(decode_problem(1, 8192, 128, false, 32, 8, fa::DType::bfloat16, 16), 0, Merge::cluster)
              .splits == 1);
    CHECK_THROWS_WITH_AS(fa::run_once(p, in, with_splits(fa::step11::kMaxClusterSplits + 1, Merge::cluster)),
                         doctest::Contains("at most 16 splits"), fa::UsageError);
    if (const int most = largest_cluster(p); most < fa::step11::kMaxClusterSplits)
      CHECK_THROWS_WITH_AS(fa::run_once(p, in, with_splits(most + 1, Merge::cluster)),
                           doctest::Contains("cannot hold a cluster"), fa::UsageError);
    // Splits chosen against float64, with no memory beyond the tensors.
    check_case(p, 10951, 0, fa::InputKind::normal, Merge::cluster);
    // One row at D = 32: 4 (row, 8-column) pairs over 8 blocks, so that half the cluster owns none
    // and only merges nothing after its sends; D = 96, 12 column groups over 5 blocks.
    check_case(decode_problem(1, 5000, 32, false, 2, 2, fa::DType::bfloat16, 1), 10952, 8, fa::InputKind::normal,
               Merge::cluster);
    check_case(decode_problem(2, 3001, 96, true, 8, 2, fa::DType::float16), 10953, 5, fa::InputKind::normal, Merge::cluster);
  } else {
    CHECK(fa::step11::cluster_capacity(p, 2) == 0);
    CHECK_THROWS_WITH_AS(fa::run_once(p, in, with_splits(2, Merge::cluster)), doctest::Contains("compute capability 9.0"),
                         fa::UsageError);
  }
}

TEST_CASE("DecodeOptions' default merge is the fastest measured: the cluster merge on compute capability 9.0, the block merge below") {
  skip_without_gpu();
  CHECK(fa::step11::DecodeOptions{}.merge == Merge::fastest);
  CHECK(fa::step11::fastest_merge() == (clusters_here() ? Merge::cluster : Merge::block_per_row));
  const fa::Problem p = decode_problem(1, 8192, 128, false, 32, 8, fa::DType::bfloat16, 1);
  CHECK(fa::step11::plan_decode(p, 0, Merge::fastest).splits == fa::step11::plan_decode(p, 0, fa::step11::fastest_merge()).splits);
  std::uint64_t seed = 11000;
  for (const int splits : {0, 3}) {
    check_case(p, ++seed, splits, fa::InputKind::normal, Merge::fastest);
    check_case(decode_problem(5, 2000, 64, true, 8, 2, fa::DType::float16), ++seed, splits, fa::InputKind::normal, Merge::fastest);
  }
}

TEST_CASE("the last block's merge leaves its counters at zero: a third launch on one context, outputs poisoned between") {
  skip_without_gpu();
  const fa::Problem p = decode_problem(2, 5000, 128, true, 8, 2, fa::DType::bfloat16);
  const fa::AttentionData in = fa::make_inputs(p, 10900, fa::InputKind::normal);
  const fa::DeviceForward fused = with_splits(9, Merge::last_block);
  // Three launches on one context (its scratch, so its counters, kept), O and LSE set to NaN before
  // the second and the third: a counter left at anything but 0 would make no block merge, and the
  // NaN would stay.
  const fa::DeviceForward thrice = [&](const fa::Problem& q, const fa::AttentionInputs& i, const fa::AttentionOutputs& o,
                                       fa::DeviceContext& ctx) {
    for (int launch = 0; launch < 3; ++launch) {
      if (launch > 0) {
        FA_CUDA_CHECK(cudaMemsetAsync(o.o.data, 0xFF, static_cast<std::size_t>(q.q_elements()) * fa::size_of(q.dtype), ctx.stream));
        FA_CUDA_CHECK(cudaMemsetAsync(o.lse.data, 0xFF, static_cast<std::size_t>(q.batch * q.heads * q.seq_q) * 4, ctx.stream));
      }
      fused(q, i, o, ctx);
    }
  };
  const fa::GpuRun once = fa::run_once(p, in, fused), three = fa::run_once(p, in, thrice);
  fa::testing::check_verified(p, in, three.out, "10 split_kv_fused_merge, third launch");
  CHECK(three.out.o.to_float() == once.out.o.to_float());  // the same kernel, the same order of sums
  CHECK(three.out.lse.to_float() == once.out.lse.to_float());
}

TEST_CASE("read_cache, the floor: nothing allocated beyond the tensors; O written as 0 and LSE as −inf over poisoned outputs") {
  skip_without_gpu();
  std::uint64_t seed = 11000;
  for (const fa::DType t : kDtypes)
    for (const std::int64_t nk : {1, 77, 4097}) {  // caches of a 16-byte chunk's multiple, and not
      const fa::Problem p = decode_problem(3, nk, 128, false, 8, 2, t);
      INFO(p.describe() << " " << fa::to_string(t));
      const fa::AttentionData in = fa::make_inputs(p, ++seed, fa::InputKind::normal);
      const fa::GpuRun r = fa::run_once(p, in, fa::step11::read_cache_only);  // O and LSE poisoned first
      CHECK(r.extra_bytes == 0);
      int wrong = 0;
      for (const float x : r.out.o.to_float()) wrong += !(x == 0.0f);  // NaN counts as wrong
      for (const float x : r.out.lse.to_float()) wrong += !(x == -INFINITY);
      CHECK(wrong == 0);
    }
}

TEST_CASE("the chosen splits split a long cache of one sequence, and the result matches stage 07 on every row") {
  skip_without_gpu();
  // B = 1, 32 query heads on 8, 32k keys: what the stage is for. Sampled rows against float64
  // (all 32 rows here), every row against stage 07 on K/V repeated to 32 heads.
  const fa::Problem p = decode_problem(1, 32768, 128, false, 32, 8, fa::DType::bfloat16, 1);
  const fa::step11::DecodePlan plan = fa::step11::plan_decode(p);
  CHECK(plan.splits > 1);
  CHECK(plan.blocks * plan.splits >= plan.slots / 2);
  CHECK(plan.blocks * (plan.splits - 1) < plan.slots / 2 + 1);
  const fa::AttentionData in = fa::make_inputs(p, 10900);
  const fa::GpuRun ours = fa::run_once(p, in, fa::step11::attention_forward_split_kv);
  fa::VerifyPlan all_rows;
  all_rows.max_full_flops = 1e30;
  all_rows.previous = fa::PreviousStage{"07 flash", fa::gpu_forward(fa::step11::stage07_repeated_heads)};
  const fa::Verification v = fa::verify_forward(p, in, ours.out, all_rows, 0);
  for (const fa::CompareReport& r : v.reports) CHECK_MESSAGE(r.ok(), r.summary());
  CHECK_MESSAGE(v.against.find("07 flash (all rows)") != std::string::npos, v.against);
}

TEST_CASE("a batch of caches of different lengths: each entry as if it were alone") {
  skip_without_gpu();
  // Capacity Nk = 2000; entry b holds cache_lens[b] keys (the rest of its rows are garbage and must
  // not be read: NaN here). Each entry is checked against float64 on its own keys.
  for (const bool causal : {false, true}) {
    const std::vector<int> lens = {2000, 1, 77, 0, 1500};
    fa::Problem p = decode_problem(3, 2000, 128, causal, 8, 2, fa::DType::bfloat16, static_cast<std::int64_t>(lens.size()));
    fa::AttentionData in = fa::make_inputs(p, causal ? 10950 : 10951);
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t h = 0; h < p.kv_heads(); ++h)
        for (std::int64_t j = lens[b]; j < p.seq_k; ++j)
          for (std::int64_t c = 0; c < p.dim; ++c) {
            const std::int64_t at = ((b * p.kv_heads() + h) * p.seq_k + j) * p.dim + c;
            in.k.set(at, NAN);
            in.v.set(at, NAN);
          }
    fa::MemoryMeter meter;
    fa::DeviceBuffer<int> lens_device(meter, lens.size());
    lens_device.upload(lens.data(), lens.size());
    const int* lens_ptr = lens_device.data();
    const fa::GpuRun r = fa::run_once(p, in, [lens_ptr](const fa::Problem& q, const fa::AttentionInputs& i,
                                                        const fa::AttentionOutputs& o, fa::DeviceContext& ctx) {
      fa::step11::decode_forward(q, i, o, ctx, fa::step11::DecodeOptions{.splits = 0, .cache_lens = lens_ptr});
    });
    for (std::int64_t b = 0; b < p.batch; ++b) {
      fa::Problem one = p;
      one.batch = 1;
      one.seq_k = lens[b];
      INFO("entry " << b << ", " << lens[b] << " keys, " << (causal ? "causal" : "not causal"));
      fa::AttentionResult got(one);
      const std::int64_t q_per = p.heads * p.seq_q * p.dim, l_per = p.heads * p.seq_q;
      for (std::int64_t e = 0; e < q_per; ++e) got.o.set(e, r.out.o.get(b * q_per + e));
      for (std::int64_t e = 0; e < l_per; ++e) got.lse.set(e, r.out.lse.get(b * l_per + e));
      if (lens[b] == 0) {  // no key at all: O = 0 and LSE = −inf on every row
        for (std::int64_t e = 0; e < l_per; ++e) CHECK(got.lse.get(e) == -INFINITY);
        for (std::int64_t e = 0; e < q_per; ++e) CHECK(got.o.get(e) == 0.0f);
        continue;
      }
      fa::AttentionData alone{fa::HostTensor(fa::q_shape(one), p.dtype), fa::HostTensor(fa::kv_shape(one), p.dtype),
                              fa::HostTensor(fa::kv_shape(one), p.dtype), {}};
      for (std::int64_t e = 0; e < q_per; ++e) alone.q.set(e, in.q.get(b * q_per + e));
      for (std::int64_t h = 0; h < p.kv_heads(); ++h)
        for (std::int64_t e = 0; e < lens[b] * p.dim; ++e) {
          const std::int64_t from = ((b * p.kv_heads() + h) * p.seq_k) * p.dim + e;
          alone.k.set(h * lens[b] * p.dim + e, in.k.get(from));
          alone.v.set(h * lens[b] * p.dim + e, in.v.get(from));
        }
      fa::testing::check_verified(one, alone, got, "10 split_kv, one cache of the batch");
      if (causal) fa::testing::check_empty_rows(one, got);
    }
  }
}

TEST_CASE("a paged cache: bit for bit the contiguous cache's result, pages in a scattered order") {
  skip_without_gpu();
  std::uint64_t seed = 11500;
  struct Shape {
    std::int64_t nq, nk, batch;
  };
  // A cache shorter than one page, one that ends inside a page, one of whole pages; 1 to 16 queries.
  for (const fa::DType t : kDtypes)
    for (const std::int64_t d : {64, 128, 256})
      for (const int page_size : {64, 256})
        for (const Shape s : {Shape{1, 50, 3}, Shape{4, 4097, 2}, Shape{16, 1024, 1}})
          for (const bool causal : {false, true}) {
            const fa::Problem p = decode_problem(s.nq, s.nk, d, causal, 8, 2, t, s.batch);
            INFO(p.describe() << " " << fa::to_string(t) << ", pages of " << page_size);
            const fa::AttentionData in = fa::make_inputs(p, ++seed);
            const fa::DeviceForward paged = [page_size](const fa::Problem& q, const fa::AttentionInputs& i,
                                                        const fa::AttentionOutputs& o, fa::DeviceContext& ctx) {
              fa::step11::decode_forward_paged(q, i, o, ctx, fa::step11::DecodeOptions{.splits = 3, .merge = Merge::block_per_row},
                                               page_size);
            };
            const fa::GpuRun contiguous = fa::run_once(p, in, with_splits(3, Merge::block_per_row));
            const fa::GpuRun r = fa::run_once(p, in, paged);
            CHECK(r.out.o.to_float() == contiguous.out.o.to_float());  // the same keys, the same order of sums
            CHECK(r.out.lse.to_float() == contiguous.out.lse.to_float());
            fa::testing::check_verified(p, in, r.out, "10 split_kv_paged");
            const std::int64_t pages = p.batch * ((p.seq_k + page_size - 1) / page_size);
            const std::int64_t pools = 2 * pages * p.kv_heads() * page_size * p.dim * 2;  // K and V, 16-bit
            CHECK(r.extra_bytes == contiguous.extra_bytes + pools + pages * 4);           // and the block table
          }
}

TEST_CASE("overlap_previous: a step started before the kernel ahead of it ends reads that kernel's Q and newest keys") {
  skip_without_gpu();
  // Q and the newest Nq keys and values of each K/V head are written by the kernel before the step
  // (late_writer), 200 µs after it lets the step start; until then they hold 784.0, which would
  // dominate every score. The step must take its first tiles of older keys early and everything
  // else after its wait: against float64, and bit for bit the step launched after the writer ends.
  const fa::Problem p = decode_problem(2, 1000, 128, false, 8, 2, fa::DType::bfloat16, 1);
  const fa::AttentionData in = fa::make_inputs(p, 11800);
  if (fa::current_compute_capability() < 90) {
    const fa::step11::DecodeOptions o{.overlap_previous = true};
    CHECK_THROWS_AS(fa::run_once(p, in, [&](const fa::Problem& q, const fa::AttentionInputs& i, const fa::AttentionOutputs& out,
                                            fa::DeviceContext& ctx) { fa::step11::decode_forward(q, i, out, ctx, o); }),
                    fa::UsageError);
    return;
  }
  for (const Merge merge : {Merge::cluster, Merge::block_per_row})
    for (const int splits : {1, 8}) {  // 8: the newest keys are in the last split's first tiles
      INFO(splits << " splits, " << merged_by(merge));
      auto step = [&](bool overlap) -> fa::DeviceForward {
        return [&, overlap](const fa::Problem& q, const fa::AttentionInputs& i, const fa::AttentionOutputs& out,
                            fa::DeviceContext& ctx) {
          // Where the writer's bytes go: Q, then each K/V head's newest Nq rows of K and of V.
          std::vector<std::pair<const void*, long long>> parts{{i.q.data, q.q_elements() * 2}};
          for (std::int64_t h = 0; h < q.kv_heads(); ++h)
            for (const void* base : {i.k.data, i.v.data})
              parts.push_back({static_cast<const char*>(base) + ((h + 1) * q.seq_k - q.seq_q) * q.dim * 2, q.seq_q * q.dim * 2});
          // Each part saved, then set to 784.0 (bytes 0x44), and written back late.
          REQUIRE(parts.size() <= LateWrites::kMax);
          LateWrites w;
          for (const auto& [at, bytes] : parts) {
            void* saved = ctx.scratch("saved " + std::to_string(w.copies), static_cast<std::size_t>(bytes));
            FA_CUDA_CHECK(cudaMemcpyAsync(saved, at, static_cast<std::size_t>(bytes), cudaMemcpyDeviceToDevice, ctx.stream));
            FA_CUDA_CHECK(cudaMemsetAsync(const_cast<void*>(at), 0x44, static_cast<std::size_t>(bytes), ctx.stream));
            w.from[w.copies] = static_cast<const int4*>(saved);
            w.to[w.copies] = static_cast<int4*>(const_cast<void*>(at));
            w.count[w.copies++] = bytes / 16;
          }
          late_writer<<<1, 256, 0, ctx.stream>>>(w, 200'000);
          FA_CUDA_CHECK_LAUNCH();
          fa::step11::decode_forward(q, i, out, ctx,
                                     fa::step11::DecodeOptions{.splits = splits, .merge = merge, .overlap_previous = overlap});
        };
      };
      const fa::GpuRun after = fa::run_once(p, in, step(false)), overlapped = fa::run_once(p, in, step(true));
      fa::testing::check_verified(p, in, overlapped.out, "10 split_kv, overlap_previous");
      CHECK(overlapped.out.o.to_float() == after.out.o.to_float());
      CHECK(overlapped.out.lse.to_float() == after.out.lse.to_float());
    }
}
