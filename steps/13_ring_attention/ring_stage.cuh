// ring_stage.cuh — stage 13 for the course's harness: the ring's own command-line options (beside
// the common ones) and the variants that step13_ring_attention runs: the ring, the ring with each
// hop after its step, the contiguous split, and the single-GPU kernel on the whole sequence beside
// them (the comparison, and the forward's second opinion).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "13_ring_attention/ring_gpu.cuh"
#include "fa/stage.hpp"

namespace fa::step13 {

struct RingCommandLine {
  int gpus = 0;  // 0: every visible GPU
  std::string split = "zigzag", transport = "nccl";
  bool backward = false, no_overlap = false, no_one_gpu = false;
  std::string timeline_path;  // --timeline FILE (lab/ring_timeline.cuh)

  void add_to(CLI::App& app);
  Pass pass() const { return backward ? Pass::backward : Pass::forward; }
  // The ring asked for; throws fa::UsageError for a bad --split or --transport, or a case that is
  // not self-attention (every length of the sweep must have Nq = Nk).
  RingOptions ring_options(const RunOptions& run) const;
};

// The harness's definition of the stage for this ring and pass.
StageDefinition ring_stage(const RingOptions& ring, Pass pass, bool with_one_gpu);

}  // namespace fa::step13
