// decode_stage.cuh — stage 11 for the course's harness: its own command-line options (beside the
// common ones) and the variants that step11_decoding runs: the split kernel with each merge of the
// ladder (split_kv, split_kv_block_merge, split_kv_fused_merge, split_kv_cluster_merge), one split,
// a paged cache, the plain read of the cache (lab/read_cache.cuh) and stage 07 on repeated heads.
#pragma once

#include <CLI/CLI.hpp>

#include "fa/stage.hpp"

namespace fa::step11 {

struct DecodeCommandLine {
  int splits = 0;       // 0: chosen for this GPU
  int page_size = 256;  // split_kv_paged's keys per page
  void add_to(CLI::App& app);
};

// The harness's definition of the stage for these options; `run` must outlive it (its report of the
// splits reads the sizes).
StageDefinition decode_stage(const RunOptions& run, const DecodeCommandLine& options);

}  // namespace fa::step11
