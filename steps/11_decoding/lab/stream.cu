// step11_stream (lab/) — decoding steps as a model runs them: one after another in a stream, not one at a
// time. The stage's executable times a step alone (L2 flushed, events around one launch), where the
// launch, the memory's first round trip and the last block's tail are a fixed cost of 4-7 µs beside
// 11 µs of bytes at 8k keys (docs/11_decoding.md, "The floor in two numbers"). A model decodes one
// token through many layers, each with its own cache: here L layers of the chapter's decoding shape (B = 1,
// Hq = 32, Hkv = 8, Nq = 1, D = 128, bf16), their steps launched back to back, the time of a round of
// L steps over L (the L2 flushed before each round; L caches of 32 MiB or more do not fit it).
// 32 layers by default: a model with this head layout (Llama 3 8B, for one) has 32. Short chains
// flattered an early start of the next step: it was the fastest over 8 layers and the slowest over
// 32, where the steps' clusters were measured two to a GPC (docs/11_decoding.md, "Where the next
// step may start").
//
// Rows, per cache length:
//   cluster_merge_alone       one step timed alone, as step11_decoding times split_kv_cluster_merge;
//   cluster_merge_stream      L steps back to back, each launched when the one before has finished;
//   cluster_merge_overlapped  the same with programmatic dependent launch (DecodeOptions::
//                             overlap_previous): a step's blocks start as the previous step's
//                             blocks exit, copy their first tiles of old keys, and read Q only
//                             once the previous step has finished;
//   read_cache_stream, read_cache_overlapped  the plain read of each cache (not attention), alike.
// Also printed per length: how many clusters of the step's size the GPU holds at once. A step is
// B·Hkv clusters; two steps run side by side in full only where the GPU holds both.
// Check: every layer's O and LSE from the overlapped stream equal, bit for bit, decode_forward
// launched alone on that layer (the stage verifies that one against float64); exit 1 if not.
// A measuring tool: the inputs are hashed uniforms. tools/compare_decode_stream.py times PyTorch's
// SDPA the same way (L calls captured in one CUDA graph) beside it.
//
//   build/steps/11_decoding/step11_stream [--layers L] [--reps R] [--splits S] [--json FILE] [Nk ...]
// (default: 32 layers, 30 rounds, the splits chosen as the stage chooses them, Nk = 8k 16k 32k)
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "11_decoding/inference.cuh"
#include "11_decoding/lab/read_cache.cuh"
#include "fa/cli.hpp"
#include "fa/cuda/check.cuh"
#include "fa/cuda/device.cuh"
#include "fa/cuda/device_buffer.cuh"
#include "fa/cuda/event_timer.cuh"
#include "fa/cuda/fill.cuh"
#include "fa/memory.hpp"
#include "fa/results.hpp"

namespace {

using T = __nv_bfloat16;

// One layer: its Q, cache, and outputs.
struct Layer {
  fa::DeviceBuffer<T> q, k, v, o;
  fa::DeviceBuffer<float> lse;
  Layer(fa::MemoryMeter& meter, const fa::Problem& p, unsigned seed)
      : q(meter, static_cast<std::size_t>(p.q_elements())), k(meter, static_cast<std::size_t>(p.kv_elements())),
        v(meter, static_cast<std::size_t>(p.kv_elements())), o(meter, static_cast<std::size_t>(p.q_elements())),
        lse(meter, static_cast<std::size_t>(p.lse_elements())) {
    fa::fill_hashed_uniform<<<1024, 256>>>(q.data(), static_cast<long>(q.size()), seed, 0.0f, 4.0f);
    fa::fill_hashed_uniform<<<1024, 256>>>(k.data(), static_cast<long>(k.size()), seed + 1, 0.0f, 4.0f);
    fa::fill_hashed_uniform<<<1024, 256>>>(v.data(), static_cast<long>(v.size()), seed + 2, 0.0f, 2.0f);
    FA_CUDA_CHECK_LAUNCH();
  }
  fa::AttentionInputs in(const fa::Problem& p) const {
    const fa::Shape4 qs{p.batch, p.heads, p.seq_q, p.dim}, kvs{p.batch, p.kv_heads(), p.seq_k, p.dim};
    return {{q.data(), p.dtype, qs}, {k.data(), p.dtype, kvs}, {v.data(), p.dtype, kvs}};
  }
  fa::AttentionOutputs out(const fa::Problem& p) {
    return {{o.data(), p.dtype, {p.batch, p.heads, p.seq_q, p.dim}}, {lse.data(), fa::DType::float32, {p.batch, p.heads, p.seq_q, 1}}};
  }
};

template <class U>
std::vector<U> on_host(const fa::DeviceBuffer<U>& b) {
  std::vector<U> h(b.size());
  b.download(h.data(), h.size());
  return h;
}

}  // namespace

int main(int argc, char** argv) try {
  int layers = 32, reps = 30, splits = 0;
  std::string json;
  std::vector<std::string> lengths;
  CLI::App app{"step11_stream: decoding steps back to back, alone and overlapped (programmatic dependent launch),\n"
               "beside the plain read of the cache (the header of steps/11_decoding/stream.cu says more)"};
  app.add_option("--layers", layers, "layers, each with its own Q, cache and outputs (default 32)")->check(CLI::Range(1, 64));
  app.add_option("--reps", reps, "timed rounds (default 30)")->check(CLI::Range(1, 10000));
  app.add_option("--splits", splits, "key chunks (default: chosen as the stage chooses them)")
      ->check(CLI::Range(1, fa::step11::kMaxClusterSplits));
  app.add_option("--json", json, "results file");
  app.add_option("lengths", lengths, "cache lengths Nk, k suffix allowed (default 8k 16k 32k)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::printf("%s", app.help().c_str());
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "step11_stream: error: %s (see --help)\n", e.what());
    return 2;
  }
  std::vector<std::int64_t> sizes;
  for (const std::string& n : lengths) sizes.push_back(fa::parse_size(n, "Nk"));  // UsageError: exit 2
  if (sizes.empty()) sizes = {8192, 16384, 32768};
  if (!json.empty()) fa::check_writable_file(json, "--json");
  if (const std::string why = fa::cuda_skip_reason(90); !why.empty()) {
    std::printf("step11_stream: skipped: %s\n", why.c_str());
    return 77;  // CTest's "skipped"
  }

  std::string command = argv[0];
  for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
  std::vector<fa::ResultRow> rows;
  bool all_equal = true;
  std::printf("%-26s %8s %12s %12s %12s\n", "variant (per step)", "Nk", "median us", "min us", "GB/s of cache");
  for (const std::int64_t nk : sizes) {
    fa::Problem p{.batch = 1, .heads = 32, .heads_kv = 8, .seq_q = 1, .seq_k = nk, .dim = 128, .dtype = fa::DType::bfloat16};
    fa::MemoryMeter meter;
    std::vector<Layer> stack;
    stack.reserve(static_cast<std::size_t>(layers));
    for (int l = 0; l < layers; ++l) stack.emplace_back(meter, p, 1000u + 17u * static_cast<unsigned>(l));
    fa::DeviceContext ctx(meter);
    const fa::step11::DecodeOptions plain{.splits = splits, .merge = fa::step11::Merge::cluster};
    fa::step11::DecodeOptions overlapped = plain;
    overlapped.overlap_previous = true;
    auto decode = [&](int l, const fa::step11::DecodeOptions& o) {
      fa::step11::decode_forward(p, stack[l].in(p), stack[l].out(p), ctx, o);
    };
    auto read = [&](int l, bool overlap) { fa::step11::read_cache(p, stack[l].in(p), stack[l].out(p), ctx, overlap); };

    // The reference first: each layer launched alone (plain launches), its O and LSE kept.
    std::vector<std::vector<T>> o_alone;
    std::vector<std::vector<float>> lse_alone;
    for (int l = 0; l < layers; ++l) {
      decode(l, plain);
      FA_CUDA_CHECK(cudaDeviceSynchronize());
      o_alone.push_back(on_host(stack[l].o));
      lse_alone.push_back(on_host(stack[l].lse));
    }

    struct Case {
      const char* variant;
      bool stream, comparison;
      std::function<void(int)> step;
    };
    const std::vector<Case> cases{
        {"cluster_merge_alone", false, false, [&](int l) { decode(l, plain); }},
        {"cluster_merge_stream", true, false, [&](int l) { decode(l, plain); }},
        {"cluster_merge_overlapped", true, false, [&](int l) { decode(l, overlapped); }},
        {"read_cache_stream", true, true, [&](int l) { read(l, false); }},
        {"read_cache_overlapped", true, true, [&](int l) { read(l, true); }},
    };
    const double cache_bytes = 2.0 * p.kv_elements() * 2;
    const int used_splits = fa::step11::plan_decode(p, splits, fa::step11::Merge::cluster).splits;
    // Two steps overlap only where the GPU holds both grids' clusters at once: a step is B·Hkv
    // clusters of `splits` blocks (one row tile at this shape).
    const int capacity = fa::step11::cluster_capacity(p, used_splits);
    const int step_clusters = static_cast<int>(p.batch * p.kv_heads());
    std::printf("Nk %lld: a step is %d clusters of %d block%s; the GPU holds %d such clusters at once\n",
                static_cast<long long>(nk), step_clusters, used_splits, used_splits == 1 ? "" : "s", capacity);
    for (const Case& c : cases) {
      const int steps = c.stream ? layers : 1;
      const fa::TimingStats t = fa::time_device(
          [&](cudaStream_t) {
            for (int l = 0; l < steps; ++l) c.step(l);
          },
          nullptr, /*warmup=*/3, reps);
      fa::ResultRow row;
      row.stage = "11";
      row.variant = c.variant;
      row.comparison = c.comparison;
      row.problem = p;
      row.median_ms = t.median_ms / steps;
      row.min_ms = t.min_ms / steps;
      row.max_ms = t.max_ms / steps;
      row.reps = t.reps;
      row.gbps = cache_bytes / (row.median_ms * 1e-3) / 1e9;
      row.tflops = 4.0 * p.heads * p.seq_q * p.seq_k * p.dim / (row.median_ms * 1e-3) / 1e12;
      row.note = std::to_string(used_splits) + " splits (" + std::to_string(step_clusters) + " clusters a step, " +
                 std::to_string(capacity) + " at once); ";
      row.note += c.stream ? "per step: a round of " + std::to_string(layers) + " layers' steps back to back, over " +
                                std::to_string(layers) + " (the L2 flushed before each round)"
                          : "one step alone, the L2 flushed before it (as step11_decoding times it)";
      if (std::strcmp(c.variant, "cluster_merge_overlapped") == 0) {
        // The last round's outputs against each layer launched alone, bit for bit (here, before the
        // read_cache rows overwrite O with zeros).
        bool equal = true;
        for (int l = 0; l < layers; ++l)
          equal = equal && on_host(stack[l].o) == o_alone[l] && on_host(stack[l].lse) == lse_alone[l];
        all_equal = all_equal && equal;
        row.verified = true;
        row.verification_ok = equal;
        row.reference = "each layer's decode_forward launched alone, bit for bit";
        row.verification = "all rows";
      }
      std::printf("%-26s %8lld %12.2f %12.2f %12.0f  %d splits%s\n", c.variant, static_cast<long long>(nk), 1e3 * row.median_ms, 1e3 * row.min_ms,
                  row.gbps, used_splits,
                  row.verified ? (row.verification_ok ? "  outputs equal the plain launches'" : "  OUTPUTS DIFFER") : "");
      rows.push_back(row);
    }
  }
  if (!json.empty()) fa::write_results_json(json, "11", fa::device_metadata(command), rows);
  std::printf("step11_stream: %d layers, %s\n", layers,
              all_equal ? "every overlapped step's O and LSE equal the step launched alone (bit for bit)"
                        : "FAIL: an overlapped step's outputs differ from the step launched alone");
  return all_equal ? 0 : 1;
} catch (const fa::UsageError& e) {
  std::fprintf(stderr, "step11_stream: error: %s\n", e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "step11_stream: error: %s\n", e.what());
  return 1;
}
