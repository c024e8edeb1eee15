// step11_decoding — runs stage 11's split-KV decoding (grouped heads, a few query rows against a
// long cache) with each merge of the ladder, beside one split (the grid without the idea), a plain
// read of the cache (the floor) and stage 07 (its K/V heads repeated to Hq); verifies it against
// float64 (all or sampled rows, the 16-bit rule of docs/tolerance.md) and against stage 07 on every
// row, and charts memory and time. The default: decoding one token (Nq = 1) with 32 query heads on
// 8 K/V heads, D = 128, bf16, caches of 1k to 32k keys. Steps in a stream: lab/stream.cu.
//
//   build/steps/11_decoding/step11_decoding                                 the default sweep
//   build/steps/11_decoding/step11_decoding --seq-q 4 --seq-k 100k --causal --batch 2
//   build/steps/11_decoding/step11_decoding --variant split_kv --splits 8 --seq-k 32k
// Prefill with grouped heads and packed batches: stage 12 (step12_variable_lengths).
#include "11_decoding/decode_stage.cuh"
#include "11_decoding/inference.cuh"
#include "fa/cuda/stage_arch.cuh"
#include "fa/stage.hpp"

int main(int argc, char** argv) {
  fa::CliSpec spec;
  spec.program = "step11_decoding";
  spec.summary = "split-KV decoding with grouped-query heads: a few queries against a long K/V cache (GPU)";
  spec.defaults.batch = 1;
  spec.defaults.heads = 32;
  spec.defaults.heads_kv = 8;
  spec.defaults.dim = 128;
  spec.defaults.dtype = fa::DType::bfloat16;
  spec.default_sweep = {1024, 8192, 32768};
  spec.default_seq_q = 1;  // decoding: a sweep (or --seq-k alone) is over the cache; one new query
  spec.supports = fa::step11::kSupports;
  spec.variants = {"split_kv", "split_kv_block_merge", "split_kv_fused_merge", "split_kv_cluster_merge", "one_split",
                   "split_kv_paged"};
  spec.notes =
      "kernel: one block per (batch, K/V head, 16 query rows, key chunk): the G = Hq/Hkv query heads of a\n"
      "group are rows of one tile (K/V read once per group); 4 warps split the chunk's key tiles (32 keys at\n"
      "D = 128, 64 at D = 64), each with two cp.async stages, merged in shared memory (the cluster merge\n"
      "sends each warp's part instead); mma.sync for both products. The chunks are merged by the LSE rule\n"
      "(holes/split_merge.hpp), four ways, the rungs of the ladder (ladder/, then decode_kernel.cuh):\n"
      "split_kv: a second kernel, a warp per row; key chunks chosen from the shape and the SM count (--splits N);\n"
      "split_kv_block_merge: a second kernel, a block per row (about 7 µs faster, H100);\n"
      "split_kv_fused_merge: no merge kernel: the last block of each row tile to finish merges its rows;\n"
      "split_kv_cluster_merge: no merge kernel, no partials in global memory: a row tile's splits (chosen: at most 8)\n"
      "are one thread-block cluster; each warp sends its part (st.async) into the shared memory of the blocks that\n"
      "merge it, an mbarrier counting the bytes (compute capability 9.0; the fastest on an H100, and there\n"
      "decode_forward's default, Merge::fastest);\n"
      "one_split: one chunk, no merge kernel.\n"
      "split_kv_paged: split_kv_block_merge on a paged copy of the cache (pages of --page-size keys in a\n"
      "scattered order, read through a block table; the copy timed apart in split_ms).\n"
      "read_cache (runs beside every decoding case, like the comparison): not attention, a plain read of the cache:\n"
      "K and V read once (one wave, as many blocks as fit), nothing computed, O = 0; not verified.\n"
      "memory beyond Q, K, V, O, LSE: the partial results, splits·B·Hq·Nq·(D + 1) floats (measured); the\n"
      "fused merge's counters (one int per row tile); the paged copy's pools and block table. The cluster merge: none.\n"
      "compared with: stage 07 on K/V repeated to Hq heads (the repeat is timed with it).\n"
      "steps back to back, and overlapping the step before (programmatic dependent launch): step11_stream\n"
      "(steps/11_decoding/lab/stream.cu), built beside this executable.\n"
      "verification: float64 on all rows up to 2e9 FLOPs, sampled rows beyond (docs/tolerance.md);\n"
      "stage 07 on the same inputs on every row.";
  fa::StageCli cli(spec);
  fa::step11::DecodeCommandLine options;
  options.add_to(cli.app());
  if (const auto exit_code = cli.parse(argc, argv)) return *exit_code;
  if (auto refused = fa::refuse_on_this_device(spec.program, fa::step11::device_refusal(cli.options().problem)))
    return *refused;
  return fa::run_stage(cli, fa::step11::decode_stage(cli.options(), options));
}
